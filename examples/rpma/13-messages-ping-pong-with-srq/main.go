// Command 13-messages-ping-pong-with-srq is the Go counterpart of librpma's
// example 13-messages-ping-pong-with-srq: several clients play the
// ping-pong of example 08 with one server whose connections share a
// receive queue (SRQ) and its receive CQ. The server accepts connections
// from an epoll loop on the endpoint's file descriptor until it times out
// (or, a goverbs addition, until <clients> have connected), then answers
// every message on the SRQ's receive CQ on the connection it came from
// (found by QP number), until every client has said I_M_DONE.
//
//	13-messages-ping-pong-with-srq server [-a ADDR] [-p PORT] [<timeout-ms> [<clients>]]
//	13-messages-ping-pong-with-srq client [-a ADDR] [-p PORT] <seed> <rounds>
package main

import (
	"context"
	"encoding/binary"
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
	os.Exit(common.Main("13-messages-ping-pong-with-srq", "[<timeout-ms> [<clients>]] (server) | <seed> <rounds> (client)", server, client, os.Args[1:], os.Stdout))
}

const (
	msgSize   = 8
	clientMax = 10
	timeout5s = 5000
)

type connCtx struct {
	conn  *rpma.Conn
	qpNum uint32
}

func server(ctx context.Context, o *common.Opts, args []string) error {
	timeout, want := timeout5s, clientMax
	var err error
	if len(args) > 0 {
		if timeout, err = strconv.Atoi(args[0]); err != nil {
			return fmt.Errorf("timeout: %w", err)
		}
	}
	if len(args) > 1 {
		if want, err = strconv.Atoi(args[1]); err != nil || want < 1 || want > clientMax {
			return fmt.Errorf("clients: %q", args[1])
		}
	}
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	srq, err := peer.NewSRQ(nil)
	if err != nil {
		return err
	}
	defer srq.Delete()
	cfg := o.ConnCfg(nil)
	cfg.SetSRQ(srq)
	recv, err := peer.RegMR(make([]byte, clientMax*msgSize), rpma.UsageRecv)
	if err != nil {
		return err
	}
	defer recv.Dereg()
	send, err := peer.RegMR(make([]byte, clientMax*msgSize), rpma.UsageSend)
	if err != nil {
		return err
	}
	defer send.Dereg()
	ep, err := o.Listen(peer)
	if err != nil {
		return err
	}
	defer ep.Shutdown()
	var conns [clientMax]connCtx
	defer func() {
		for _, c := range conns {
			if c.conn != nil {
				c.conn.Disconnect()
				c.conn.Delete()
			}
		}
	}()
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	defer syscall.Close(epfd)
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, ep.Fd(), &syscall.EpollEvent{Events: syscall.EPOLLIN}); err != nil {
		return err
	}
	n := 0
	var evs [1]syscall.EpollEvent
	for n < want {
		k, err := syscall.EpollWait(epfd, evs[:], timeout)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if k == 0 {
			break
		}
		req, err := ep.NextConnReq(ctx, cfg)
		if err != nil {
			return err
		}
		// The first receive of the new client's slot.
		if err := srq.Recv(recv, n*msgSize, msgSize, uint64(n)); err != nil {
			req.Delete()
			return err
		}
		conn, err := common.ConnectReq(ctx, req, nil)
		if err != nil {
			return err
		}
		conns[n] = connCtx{conn: conn, qpNum: conn.QPNum()}
		n++
		o.Printf("The client #%d has been connected.\n", n)
	}
	o.Printf("Server ended listening.\n")
	rcq := srq.RCQ()
	wc := make([]verbs.WC, clientMax)
	for done := 0; done < n; {
		if err := rcq.Wait(ctx); err != nil {
			return err
		}
		for {
			got, err := rcq.GetWC(wc[:n])
			if errors.Is(err, rpma.ErrNoCompletion) {
				break
			}
			if err != nil {
				return err
			}
			for _, w := range wc[:got] {
				if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRecv {
					return fmt.Errorf("rpma_srq_recv(): %v %v", w.Opcode, w.Status)
				}
				i := -1
				for j := range n {
					if conns[j].qpNum == w.QPNum {
						i = j
					}
				}
				slot := int(w.WRID)
				if i < 0 || slot >= n {
					return fmt.Errorf("a receive from an unknown connection (qp#%d)", w.QPNum)
				}
				v := binary.LittleEndian.Uint64(recv.Bytes()[slot*msgSize:])
				if v == common.IMDone {
					done++
					continue
				}
				o.Printf("[server] value received: %d from the connection [qp#%d]\n", v, w.QPNum)
				if err := srq.Recv(recv, slot*msgSize, msgSize, uint64(slot)); err != nil {
					return err
				}
				binary.LittleEndian.PutUint64(send.Bytes()[slot*msgSize:], v+1)
				o.Printf("[server] value sent: %d from the connection [qp#%d]\n", v+1, w.QPNum)
				if err := conns[i].conn.Send(send, slot*msgSize, msgSize, rpma.CompletionOnError, 0); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func client(ctx context.Context, o *common.Opts, args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: client <seed> <rounds>")
	}
	cntr, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		return err
	}
	rounds, err := strconv.ParseUint(args[1], 10, 64)
	if err != nil || rounds < 1 {
		return fmt.Errorf("rounds: %q", args[1])
	}
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	recv, err := peer.RegMR(make([]byte, msgSize), rpma.UsageRecv)
	if err != nil {
		return err
	}
	defer recv.Dereg()
	send, err := peer.RegMR(make([]byte, msgSize), rpma.UsageSend)
	if err != nil {
		return err
	}
	defer send.Dereg()
	conn, err := common.ClientConnect(ctx, peer, o, nil, nil)
	if err != nil {
		return err
	}
	defer conn.Delete()
	for ; rounds > 0; rounds-- {
		if err := conn.Recv(recv, 0, msgSize, 1); err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(send.Bytes(), cntr)
		o.Printf("[client] value sent: %d\n", cntr)
		if err := conn.Send(send, 0, msgSize, rpma.CompletionAlways, 2); err != nil {
			return err
		}
		if err := common.WaitSendRecv(ctx, conn.CQ(), 1, false); err != nil {
			return err
		}
		cntr = binary.LittleEndian.Uint64(recv.Bytes())
		o.Printf("[client] value received: %d\n", cntr)
	}
	binary.LittleEndian.PutUint64(send.Bytes(), common.IMDone)
	if err := conn.Send(send, 0, msgSize, rpma.CompletionOnError, 3); err != nil {
		return err
	}
	return common.WaitForCloseAndDisconnect(ctx, conn)
}
