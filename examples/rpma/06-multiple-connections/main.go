// Command 06-multiple-connections is the Go counterpart of librpma's
// example 06-multiple-connections: clients connect with their names in a
// region whose descriptor travels in the private data; the server serves
// them all from one epoll loop over the endpoint's, the connections' event
// and the CQs' file descriptors, reads each name, prints it and
// disconnects the client.
//
//	06-multiple-connections server [-a ADDR] [-p PORT] [<clients>]
//	06-multiple-connections client [-a ADDR] [-p PORT] <seed>
//
// The server ends after 15 s without events, or (a goverbs addition) once
// it has served <clients> clients.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/goverbs/goverbs/examples/rpma/internal/common"
	"github.com/goverbs/goverbs/rpma"
	"github.com/goverbs/goverbs/verbs"
)

func main() {
	os.Exit(common.Main("06-multiple-connections", "<seed> (client) | [<clients>] (server)", server, client, os.Args[1:], os.Stdout))
}

const (
	maxNameSize = 32
	clientMax   = 10
	timeoutMs   = 15000
)

var names = []string{"Andy", "Chet", "Derek", "Janek", "Kacper", "Lukasz", "Oksana", "Pawel", "Piotr", "Tomasz", "Xiang", "Xiaoran", "Xiaoyan"}

type clientRes struct {
	conn *rpma.Conn
	evFd int
	cqFd int
}

type srv struct {
	ctx     context.Context
	o       *common.Opts
	ep      *rpma.Ep
	epoll   int
	dst     *rpma.MR
	clients [clientMax]clientRes
	served  int
}

// epoll tags: 0 the endpoint, 1+2i client i's events, 2+2i its completions.
func (s *srv) add(fd, tag int) error {
	return syscall.EpollCtl(s.epoll, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(tag)})
}

func (s *srv) incoming() error {
	req, err := s.ep.NextConnReq(s.ctx, s.o.ConnCfg(nil))
	if err != nil {
		return err
	}
	i := 0
	for i < clientMax && s.clients[i].conn != nil {
		i++
	}
	if i == clientMax {
		return req.Delete() // no free slot: reject
	}
	conn, err := req.Connect(s.ctx, nil)
	if err != nil {
		return err
	}
	c := &s.clients[i]
	c.conn, c.evFd = conn, conn.EventFd()
	if c.cqFd, err = conn.CQ().Fd(); err != nil {
		return err
	}
	if err := s.add(c.evFd, 1+2*i); err != nil {
		return err
	}
	return s.add(c.cqFd, 2+2*i)
}

func (s *srv) connEvent(i int) error {
	c := &s.clients[i]
	ev, err := c.conn.NextEvent(s.ctx)
	if err != nil {
		return err
	}
	switch ev {
	case rpma.ConnEstablished:
		data, err := common.DecodeData(c.conn.PrivateData())
		if err != nil {
			return err
		}
		src, err := rpma.RemoteMRFromDescriptor(data.MRDesc)
		if err != nil {
			return err
		}
		return c.conn.Read(s.dst, maxNameSize*i, src, 0, maxNameSize, rpma.CompletionAlways, uint64(i))
	case rpma.ConnClosed, rpma.ConnLost:
		syscall.EpollCtl(s.epoll, syscall.EPOLL_CTL_DEL, c.evFd, nil)
		syscall.EpollCtl(s.epoll, syscall.EPOLL_CTL_DEL, c.cqFd, nil)
		err := c.conn.Delete()
		*c = clientRes{}
		s.served++
		return err
	}
	return fmt.Errorf("client %d: unexpected event %v", i, ev)
}

func (s *srv) completion(i int) error {
	c := &s.clients[i]
	if err := c.conn.CQ().Wait(s.ctx); err != nil {
		return err
	}
	var wc [1]verbs.WC
	if _, err := c.conn.CQ().GetWC(wc[:]); err != nil {
		if errors.Is(err, rpma.ErrNoCompletion) {
			return nil
		}
		return err
	}
	if wc[0].Status != verbs.WCSuccess || wc[0].Opcode != verbs.WCRDMARead {
		c.conn.Disconnect()
		return fmt.Errorf("client %d: read %v %v", i, wc[0].Opcode, wc[0].Status)
	}
	s.o.Printf("- %s\n", common.CString(s.dst.Bytes()[maxNameSize*i:maxNameSize*(i+1)]))
	return c.conn.Disconnect()
}

func server(ctx context.Context, o *common.Opts, args []string) error {
	want := 0
	if len(args) > 0 {
		var err error
		if want, err = strconv.Atoi(args[0]); err != nil {
			return fmt.Errorf("clients: %w", err)
		}
	}
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	s := &srv{ctx: ctx, o: o}
	if s.dst, err = peer.RegMR(make([]byte, maxNameSize*clientMax), rpma.UsageReadDst); err != nil {
		return err
	}
	defer s.dst.Dereg()
	if s.epoll, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return err
	}
	defer syscall.Close(s.epoll)
	if s.ep, err = o.Listen(peer); err != nil {
		return err
	}
	defer s.ep.Shutdown()
	if err := s.add(s.ep.Fd(), 0); err != nil {
		return err
	}
	defer func() {
		for i := range s.clients {
			if c := s.clients[i].conn; c != nil {
				c.Disconnect()
				c.Delete()
			}
		}
	}()
	o.Printf("Today I have got in touch with:\n")
	var evs [1]syscall.EpollEvent
	for want == 0 || s.served < want {
		n, err := syscall.EpollWait(s.epoll, evs[:], timeoutMs)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			o.Printf("Server timed out.\n")
			return nil
		}
		switch tag := int(evs[0].Fd); {
		case tag == 0:
			err = s.incoming()
		case tag%2 == 1:
			err = s.connEvent((tag - 1) / 2)
		default:
			err = s.completion((tag - 2) / 2)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func client(ctx context.Context, o *common.Opts, args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("usage: client <seed>")
	}
	seed, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	buf := make([]byte, maxNameSize)
	common.PutCString(buf, names[seed%uint64(len(names))])
	o.Printf("My names is: %s\n", common.CString(buf))
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	mr, err := peer.RegMR(buf, rpma.UsageReadSrc)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	conn, err := common.ClientConnect(ctx, peer, o, nil, common.Data{MRDesc: mr.Descriptor()}.Encode())
	if err != nil {
		return err
	}
	return common.WaitForCloseAndDisconnect(ctx, conn)
}
