package rdmacm_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// BenchmarkPingPong is an 8-byte SEND ping-pong between two identifiers
// of this process, each round trip a send and a receive completion on
// each side: waited for with GetSendComp and GetRecvComp (blocking), or
// taken by busy-polling the CQs (polling); blocking-nospin is blocking
// with the CQs' WaitSpin 0 (every wait that finds its CQ empty sleeps at
// once). ns/op is one round trip.
func BenchmarkPingPong(b *testing.B) {
	for _, tr := range []string{"shm", "iwarp"} {
		for _, mode := range []string{"polling", "blocking", "blocking-nospin"} {
			b.Run(fmt.Sprintf("%s/%s/8B", tr, mode), func(b *testing.B) {
				addr := "127.0.0.1:0"
				if tr == "shm" {
					addr = fmt.Sprintf("unix:@goverbs-rdmacm-bench-%d-%d", os.Getpid(), unixSeq.Add(1))
				}
				c, s := benchPair(b, addr)
				if mode == "blocking-nospin" {
					for _, id := range []*rdmacm.ID{c, s} {
						id.SendCQ().SetWaitSpin(0)
						id.RecvCQ().SetWaitSpin(0)
					}
				}
				pingPong(b, c, s, mode != "polling")
			})
		}
	}
}

func benchPair(b *testing.B, addr string) (client, server *rdmacm.ID) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	attr := verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}
	ln, err := rdmacm.Listen(addr)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	got := make(chan *rdmacm.ID, 1)
	go func() {
		req, err := ln.GetRequest(ctx)
		if err != nil {
			got <- nil
			return
		}
		if req.CreateQP(nil, attr) != nil || req.Accept(ctx, nil) != nil {
			req.Close()
			got <- nil
			return
		}
		got <- req
	}()
	client, err = rdmacm.Dial(ctx, ln.LocalAddr().String(), &attr, nil)
	if err != nil {
		b.Fatal(err)
	}
	if server = <-got; server == nil {
		b.Fatal("accept failed")
	}
	b.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// side runs one end: the client sends first, the server echoes.
// The client calls mark before each round.
// Each side's first receive is posted (prepare) before either sends: iWARP
// has no RNR.
func pingPongSide(ctx context.Context, id *rdmacm.ID, buf []byte, mr *verbs.MR, n int, first, blocking bool, mark func(i int)) error {
	var wc [1]verbs.WC
	wait := func(cq *verbs.CQ, recv bool) error {
		if blocking {
			var w verbs.WC
			var err error
			if recv {
				w, err = id.GetRecvComp(ctx)
			} else {
				w, err = id.GetSendComp(ctx)
			}
			if err != nil {
				return err
			}
			return w.Err()
		}
		for {
			k, err := cq.Poll(wc[:])
			if err != nil {
				return err
			}
			if k == 1 {
				return wc[0].Err()
			}
		}
	}
	scq, rcq := id.SendCQ(), id.RecvCQ()
	for i := 0; i < n; i++ {
		if mark != nil {
			mark(i)
		}
		if !first {
			if err := wait(rcq, true); err != nil {
				return err
			}
			if err := id.PostRecv(1, buf[8:16], mr); err != nil {
				return err
			}
		}
		if err := id.PostSend(2, buf[:8], mr, verbs.SendSignaled); err != nil {
			return err
		}
		if err := wait(scq, false); err != nil {
			return err
		}
		if first {
			if err := wait(rcq, true); err != nil {
				return err
			}
			if i+1 < n {
				if err := id.PostRecv(1, buf[8:16], mr); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func pingPong(b *testing.B, c, s *rdmacm.ID, blocking bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Warm-up rounds, then the timed ones.
	const warm = 200
	prepare := func(id *rdmacm.ID) ([]byte, *verbs.MR) {
		buf := make([]byte, 16)
		mr, err := id.RegMsgs(buf)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { mr.Dereg() })
		if err := id.PostRecv(1, buf[8:16], mr); err != nil {
			b.Fatal(err)
		}
		return buf, mr
	}
	cbuf, cmr := prepare(c)
	sbuf, smr := prepare(s)
	done := make(chan error, 1)
	go func() { done <- pingPongSide(ctx, s, sbuf, smr, warm+b.N, false, blocking, nil) }()
	err := pingPongSide(ctx, c, cbuf, cmr, warm+b.N, true, blocking, func(i int) {
		if i == warm {
			b.ResetTimer()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
