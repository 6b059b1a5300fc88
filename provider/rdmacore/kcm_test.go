//go:build rdmacore && linux && cgo

package rdmacore_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// rdmacm over the kernel's rdma_cm: a listener on "rdma://ADDR:0", and a
// client that dials the listener's address without a scheme, which the
// kernel's CM must claim (an RDMA device serves it). Private data goes
// both ways, a message and an RDMA WRITE cross, and a disconnect flushes.
func TestRDMACMKernel(t *testing.T) {
	for _, dev := range testDevices(t) {
		t.Run(dev, func(t *testing.T) {
			leakcheck.Check(t)
			ip := deviceAddr(t, dev)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			attr := &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}
			ln, err := rdmacm.Listen("rdma://" + netip.AddrPortFrom(ip, 0).String())
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			type result struct {
				got []byte
				err error
			}
			res := make(chan result, 1)
			go func() {
				req, err := ln.GetRequest(ctx)
				if err != nil {
					res <- result{err: err}
					return
				}
				defer req.Close()
				if string(req.PrivateData()[:6]) != "hello?" {
					res <- result{err: errors.New("request private data " + string(req.PrivateData()))}
					return
				}
				if err := req.CreateQP(nil, *attr); err != nil {
					res <- result{err: err}
					return
				}
				if got := req.QP().PD().Context().Device().Name(); got != dev {
					res <- result{err: errors.New("server QP on " + got)}
					return
				}
				buf := make([]byte, 64)
				mr, err := req.RegMsgs(buf)
				if err != nil {
					res <- result{err: err}
					return
				}
				defer mr.Dereg()
				req.PostRecv(7, buf, mr)
				if err := req.Accept(ctx, &rdmacm.ConnParam{PrivateData: []byte("welcome")}); err != nil {
					res <- result{err: err}
					return
				}
				wc, err := req.GetRecvComp(ctx)
				if err == nil && wc.Status != verbs.WCSuccess {
					err = wc.Err()
				}
				if err != nil {
					res <- result{err: err}
					return
				}
				res <- result{got: append([]byte(nil), buf[:wc.ByteLen]...)}
				// Wait for the client's disconnect before closing.
				select {
				case <-req.Done(): // the client disconnects
				case <-ctx.Done():
				}
			}()
			// Without its scheme: the kernel's CM must claim the address.
			addr := strings.TrimPrefix(ln.LocalAddr().String(), "rdma://")
			if !strings.HasPrefix(ln.LocalAddr().String(), "rdma://") {
				t.Fatalf("listener address %v, want it in the rdma:// scheme", ln.LocalAddr())
			}
			id, err := rdmacm.Dial(ctx, addr, attr, &rdmacm.ConnParam{PrivateData: []byte("hello?")})
			if err != nil {
				t.Fatalf("Dial %s: %v", addr, err)
			}
			defer id.Close()
			if got := id.QP().PD().Context().Device().Name(); got != dev {
				t.Fatalf("client QP on %s, want %s: the address did not go to the kernel's CM", got, dev)
			}
			if string(id.PrivateData()[:7]) != "welcome" {
				t.Fatalf("accept private data %q", id.PrivateData())
			}
			msg := []byte("hello over the kernel's rdma_cm")
			mr, err := id.RegMsgs(msg)
			if err != nil {
				t.Fatal(err)
			}
			defer mr.Dereg()
			if err := id.PostSend(1, msg, mr, verbs.SendSignaled); err != nil {
				t.Fatal(err)
			}
			wc, err := id.GetSendComp(ctx)
			if err != nil || wc.Status != verbs.WCSuccess {
				t.Fatalf("send: %v %+v", err, wc)
			}
			r := <-res
			if r.err != nil {
				t.Fatalf("server: %v", r.err)
			}
			if string(r.got) != string(msg) {
				t.Fatalf("server received %q", r.got)
			}
			if err := id.Disconnect(); err != nil {
				t.Fatalf("Disconnect: %v", err)
			}
			if st := id.QP().State(); st != verbs.QPSErr {
				t.Fatalf("QP in %v after Disconnect, want ERR", st)
			}
		})
	}
}

// A rejection reaches the client with its private data.
func TestRDMACMKernelReject(t *testing.T) {
	for _, dev := range testDevices(t) {
		t.Run(dev, func(t *testing.T) {
			leakcheck.Check(t)
			ip := deviceAddr(t, dev)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ln, err := rdmacm.Listen("rdma://" + netip.AddrPortFrom(ip, 0).String())
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				req, err := ln.GetRequest(ctx)
				if err != nil {
					return
				}
				req.Reject([]byte("go away"))
				req.Close()
			}()
			attr := &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
			_, err = rdmacm.Dial(ctx, ln.LocalAddr().String(), attr, nil)
			var rej *rdmacm.RejectedError
			if !errors.As(err, &rej) {
				t.Fatalf("Dial to a rejecting listener: %v, want a RejectedError", err)
			}
			if len(rej.PrivateData) < 7 || string(rej.PrivateData[:7]) != "go away" {
				t.Fatalf("rejection private data %q", rej.PrivateData)
			}
		})
	}
}

// Addresses no RDMA device serves stay with goverbs' own providers.
func TestRDMACMLoopbackNotClaimed(t *testing.T) {
	leakcheck.Check(t)
	ln, err := rdmacm.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := ln.DeviceContext().Device().Name(); got != "iwarp0" {
		t.Fatalf("a listener on 127.0.0.1 is on %s, want goverbs' iwarp0", got)
	}
}
