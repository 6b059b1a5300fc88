package rdmacm_test

import (
	"testing"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// A client that sends the moment Dial returns reaches a server whose accept
// may still be finishing: the message is received (the server's receive
// side used to start before its QP was established, and such a message
// then failed the QP), and the client's first event is EventEstablished even
// when the server disconnects at once. Both races were seen under load in
// package rpma's tests; this test exercises the paths but cannot force the
// timing that exposed them.
func TestImmediateTrafficAndEventOrder(t *testing.T) {
	leakcheck.Check(t)
	ln, err := rdmacm.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	attr := &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}
	for i := range 40 {
		ctx := timeout(t)
		type res struct {
			id  *rdmacm.ID
			buf []byte
			mr  *verbs.MR
			err error
		}
		got := make(chan res, 1)
		go func() {
			var r res
			defer func() { got <- r }()
			if r.id, r.err = ln.GetRequest(ctx); r.err != nil {
				return
			}
			if r.err = r.id.CreateQP(nil, *attr); r.err != nil {
				return
			}
			r.buf = make([]byte, 64)
			if r.mr, r.err = r.id.RegMsgs(r.buf); r.err != nil {
				return
			}
			if r.err = r.id.PostRecv(1, r.buf, r.mr); r.err != nil {
				return
			}
			r.err = r.id.Accept(ctx, nil)
		}()
		client, err := rdmacm.Dial(ctx, ln.LocalAddr().String(), attr, nil)
		if err != nil {
			t.Fatal(err)
		}
		msg := []byte("now")
		cmr, err := client.RegMsgs(msg)
		if err != nil {
			t.Fatal(err)
		}
		if err := client.PostSend(2, msg, cmr, 0); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("round %d: server: %v", i, r.err)
		}
		wc, err := r.id.GetRecvComp(ctx)
		if err != nil || wc.Status != verbs.WCSuccess || string(r.buf[:wc.ByteLen]) != "now" {
			t.Fatalf("round %d: receive %+v, %v", i, wc, err)
		}
		r.id.Disconnect()
		ev, err := client.NextEvent(ctx)
		if err != nil || ev.Type != rdmacm.EventEstablished {
			t.Fatalf("round %d: first event %v, %v", i, ev, err)
		}
		client.Close()
		r.id.Close()
		r.mr.Dereg()
		cmr.Dereg()
	}
}
