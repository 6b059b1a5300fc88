// Command udaddy is the Go counterpart of librdmacm's udaddy example, and
// speaks its protocol over RoCEv2 (goverbs' roce provider): rdma_cm's UDP
// port space, the server's UD QP resolved by the client (SIDR), then COUNT
// datagrams of SIZE bytes from the client, each carrying its QP number as
// immediate data, and COUNT replies from the server to the address handle
// it makes from the first one. It works against udaddy on a Linux rxe
// device, in either role, and against itself.
//
//	udaddy [-b BIND] [-p PORT] [-C COUNT] [-S SIZE]          server
//	udaddy -s SERVER [-b BIND] [-p PORT] [-C COUNT] [-S SIZE] client
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

func main() {
	server := flag.String("s", "", "server address (client mode)")
	bind := flag.String("b", "", "local address to bind")
	port := flag.String("p", "7174", "rdma_cm port")
	count := flag.Int("C", 10, "message count")
	size := flag.Int("S", 100, "message size")
	timeout := flag.Duration("t", 30*time.Second, "give up after this long (goverbs addition)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var err error
	if *server != "" {
		fmt.Println("udaddy: starting client")
		err = client(ctx, "roce://"+net.JoinHostPort(*server, *port), *bind, *count, *size)
	} else {
		fmt.Println("udaddy: starting server")
		err = serve(ctx, "roce://"+net.JoinHostPort(*bind, *port), *count, *size)
	}
	fmt.Println("test complete")
	ret := 0
	if err != nil {
		fmt.Fprintln(os.Stderr, "udaddy:", err)
		ret = 1
	}
	fmt.Printf("return status %d\n", ret)
	os.Exit(ret)
}

// node is one end: its identifier, QP, memory and the peer's address.
type node struct {
	id        *rdmacm.ID
	buf       []byte // per receive, the GRH area and one message; the message to send after them
	slot      int
	mr        *verbs.MR
	ah        *verbs.AH
	remoteQPN uint32
	size      int
}

func newNode(id *rdmacm.ID, count, size int) (*node, error) {
	attr := verbs.QPInitAttr{QPType: verbs.QPTUD, Cap: verbs.QPCap{MaxSendWR: max(count, 1), MaxRecvWR: max(count, 1), MaxSendSGE: 1, MaxRecvSGE: 1}}
	if err := id.CreateQP(nil, attr); err != nil {
		return nil, err
	}
	port, err := id.DeviceContext().QueryPort(1)
	if err != nil {
		return nil, err
	}
	if count > 0 && size > port.ActiveMTU.Bytes() {
		return nil, fmt.Errorf("message size %d is larger than active mtu %d", size, port.ActiveMTU.Bytes())
	}
	// Each receive has its own slot (udaddy's share one: its GRH and data
	// are overwritten by the next while being read).
	n := &node{id: id, slot: 40 + size, size: size}
	n.buf = make([]byte, (count+1)*n.slot)
	if n.mr, err = id.RegMsgs(n.buf); err != nil {
		return nil, err
	}
	for i := range count {
		if err := id.PostRecv(uint64(i), n.buf[i*n.slot:(i+1)*n.slot], n.mr); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// send sends count datagrams to the peer, with this QP's number as
// immediate data, signaled or not.
func (n *node) send(ctx context.Context, count int, signaled bool) error {
	var f verbs.SendFlags
	if signaled {
		f = verbs.SendSignaled
	}
	wr := []verbs.SendWR{{Opcode: verbs.WRSendWithImm, Flags: f, ImmData: n.id.QP().Num(),
		SGList: []verbs.SGE{n.mr.SGE(len(n.buf)-n.size, n.size)}, AH: n.ah, RemoteQPN: n.remoteQPN, RemoteQKey: rdmacm.UDPQKey}}
	for range count {
		if err := n.id.QP().PostSend(wr); err != nil {
			return err
		}
	}
	if signaled {
		for range count {
			if _, err := n.id.GetSendComp(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// receive waits for count datagrams; the first one gives a server the
// address back to the client.
func (n *node) receive(ctx context.Context, count int) error {
	for range count {
		wc, err := n.id.GetRecvComp(ctx)
		if err != nil {
			return err
		}
		if n.ah == nil {
			grh := n.buf[int(wc.WRID)*n.slot:][:40]
			if n.ah, err = n.id.PD().CreateAHFromWC(&wc, grh, 1); err != nil {
				return err
			}
			n.remoteQPN = wc.ImmData // the sender's QP number, as udaddy sends it
		}
	}
	return nil
}

func serve(ctx context.Context, addr string, count, size int) error {
	ln, err := rdmacm.NewID(addr, rdmacm.IDOptions{PortSpace: rdmacm.PortSpaceUDP})
	if err != nil {
		return err
	}
	defer ln.Close()
	if err := ln.Listen(); err != nil {
		return err
	}
	req, err := ln.GetRequest(ctx)
	if err != nil {
		return err
	}
	defer req.Close()
	n, err := newNode(req, count, size)
	if err != nil {
		req.Reject(nil)
		return err
	}
	if err := req.Accept(ctx, nil); err != nil {
		return err
	}
	if count == 0 {
		return nil
	}
	fmt.Println("receiving data transfers")
	if err := n.receive(ctx, count); err != nil {
		return err
	}
	fmt.Println("sending replies")
	if err := n.send(ctx, count, true); err != nil {
		return err
	}
	fmt.Println("data transfers complete")
	return nil
}

func client(ctx context.Context, addr, bind string, count, size int) error {
	id, err := rdmacm.NewID(addr, rdmacm.IDOptions{Source: bind, PortSpace: rdmacm.PortSpaceUDP})
	if err != nil {
		return err
	}
	defer id.Close()
	n, err := newNode(id, count, size)
	if err != nil {
		return err
	}
	fmt.Println("udaddy: connecting")
	if err := id.Connect(ctx, nil); err != nil {
		return err
	}
	peer, ok := id.UDPeer()
	if !ok {
		return errors.New("no UD peer after connect")
	}
	if n.ah, err = id.PD().CreateAH(peer.AH); err != nil {
		return err
	}
	n.remoteQPN = peer.QPN
	if count == 0 {
		return nil
	}
	fmt.Println("initiating data transfers")
	if err := n.send(ctx, count, false); err != nil {
		return err
	}
	fmt.Println("receiving data transfers")
	if err := n.receive(ctx, count); err != nil {
		return err
	}
	fmt.Println("data transfers complete")
	return nil
}
