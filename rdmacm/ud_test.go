package rdmacm_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// The UDP port space over RoCE: the client resolves the server's UD QP
// (SIDR), with private data both ways, sends it a datagram, and the server
// answers through an address handle made from the receive (its GRH).
func TestUDPortSpace(t *testing.T) {
	leakcheck.Check(t)
	ctx := timeout(t)
	addr := fmt.Sprintf("roce://%v:%d", roceAddr(1), 7400+unixSeq.Add(1))
	ln, err := rdmacm.NewID(addr, rdmacm.IDOptions{PortSpace: rdmacm.PortSpaceUDP})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := ln.Listen(); err != nil {
		t.Fatal(err)
	}
	udAttr := verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	served := make(chan error, 1)
	go func() {
		served <- func() error {
			req, err := ln.GetRequest(ctx)
			if err != nil {
				return err
			}
			defer req.Close()
			if !bytes.HasPrefix(req.PrivateData(), []byte("who serves?")) {
				return fmt.Errorf("request private data %q", req.PrivateData())
			}
			if err := req.CreateQP(nil, udAttr); err != nil {
				return err
			}
			buf := make([]byte, 4096)
			mr, err := req.RegMsgs(buf)
			if err != nil {
				return err
			}
			if err := req.PostRecv(1, buf[:40+64], mr); err != nil {
				return err
			}
			if err := req.Accept(ctx, &rdmacm.ConnParam{PrivateData: []byte("I do")}); err != nil {
				return err
			}
			wc, err := req.GetRecvComp(ctx)
			if err != nil {
				return err
			}
			if got := buf[40:wc.ByteLen]; string(got) != "ping" {
				return fmt.Errorf("server got %q", got)
			}
			ah, err := req.PD().CreateAHFromWC(&wc, buf[:40], 1)
			if err != nil {
				return err
			}
			copy(buf[1024:], "pong")
			if err := req.PostUDSend(2, buf[1024:1028], mr, verbs.SendSignaled, ah, wc.SrcQP); err != nil {
				return err
			}
			_, err = req.GetSendComp(ctx)
			return err
		}()
	}()

	c, err := rdmacm.NewID(addr, rdmacm.IDOptions{Source: roceAddr(2).String(), PortSpace: rdmacm.PortSpaceUDP})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateQP(nil, udAttr); err != nil {
		t.Fatal(err)
	}
	if c.QP().State() != verbs.QPSRTS {
		t.Fatalf("a UD QP of the UDP port space is %v after CreateQP, want RTS", c.QP().State())
	}
	buf := make([]byte, 4096)
	mr, err := c.RegMsgs(buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PostRecv(1, buf[:40+64], mr); err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(ctx, &rdmacm.ConnParam{PrivateData: []byte("who serves?")}); err != nil {
		t.Fatal(err)
	}
	ev, err := c.NextEvent(ctx)
	if err != nil || ev.Type != rdmacm.EventEstablished || ev.UD == nil {
		t.Fatalf("event %v (%v), want ESTABLISHED with the peer's UD QP", ev, err)
	}
	if ev.UD.QKey != rdmacm.UDPQKey || !bytes.HasPrefix(ev.PrivateData, []byte("I do")) {
		t.Fatalf("peer Q_Key %#x, private data %q", ev.UD.QKey, ev.PrivateData)
	}
	ah, err := c.PD().CreateAH(ev.UD.AH)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf[1024:], "ping")
	if err := c.PostUDSend(2, buf[1024:1028], mr, verbs.SendSignaled, ah, ev.UD.QPN); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSendComp(ctx); err != nil {
		t.Fatal(err)
	}
	wc, err := c.GetRecvComp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := buf[40:wc.ByteLen]; string(got) != "pong" {
		t.Fatalf("client got %q", got)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// A UD resolution for a port nobody serves, or one the server rejects,
// fails as a rejection.
func TestUDPortSpaceRejects(t *testing.T) {
	leakcheck.Check(t)
	ctx := timeout(t)
	addr := fmt.Sprintf("roce://%v:%d", roceAddr(1), 7400+unixSeq.Add(1))
	ln, err := rdmacm.NewID(addr, rdmacm.IDOptions{PortSpace: rdmacm.PortSpaceUDP})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := ln.Listen(); err != nil {
		t.Fatal(err)
	}
	go func() {
		if req, err := ln.GetRequest(ctx); err == nil {
			req.Reject([]byte("not you"))
			req.Close()
		}
	}()
	udAttr := verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	for _, c := range []struct {
		addr, pd string
	}{{addr, "not you"}, {fmt.Sprintf("roce://%v:%d", roceAddr(1), 6997), ""}} {
		id, err := rdmacm.NewID(c.addr, rdmacm.IDOptions{Source: roceAddr(2).String(), PortSpace: rdmacm.PortSpaceUDP})
		if err != nil {
			t.Fatal(err)
		}
		if err := id.CreateQP(nil, udAttr); err != nil {
			t.Fatal(err)
		}
		err = id.Connect(ctx, nil)
		var rej *rdmacm.RejectedError
		if !errors.As(err, &rej) || !bytes.HasPrefix(rej.PrivateData, []byte(c.pd)) {
			t.Fatalf("resolve %s: %v, want a rejection with %q", c.addr, err, c.pd)
		}
		id.Close()
	}
	// And an RC QP has no place in the UDP port space.
	id, err := rdmacm.NewID(addr, rdmacm.IDOptions{PortSpace: rdmacm.PortSpaceUDP})
	if err != nil {
		t.Fatal(err)
	}
	defer id.Close()
	if err := id.CreateQP(nil, verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: udAttr.Cap}); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("RC QP in the UDP port space: %v", err)
	}
}
