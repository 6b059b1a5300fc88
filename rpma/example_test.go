package rpma_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/goverbs/goverbs/rpma"
	"github.com/goverbs/goverbs/verbs"
)

// exampleServer listens on a free port of 127.0.0.1, accepts one connection
// with pdata as its private data (after prepare ran on the request), and
// returns the port and a channel that yields the connection.
func exampleServer(peer *rpma.Peer, cfg *rpma.ConnCfg, pdata []byte, prepare func(*rpma.ConnReq)) (string, <-chan *rpma.Conn) {
	ep, err := peer.Listen("127.0.0.1", "0")
	if err != nil {
		log.Fatal(err)
	}
	ch := make(chan *rpma.Conn, 1)
	go func() {
		defer ep.Shutdown()
		req, err := ep.NextConnReq(context.Background(), cfg)
		if err != nil {
			log.Fatal(err)
		}
		if prepare != nil {
			prepare(req)
		}
		conn, err := req.Connect(context.Background(), pdata)
		if err != nil {
			log.Fatal(err)
		}
		ch <- conn
	}()
	return ep.Port(), ch
}

func examplePeer() *rpma.Peer {
	ctx, err := rpma.DeviceContext("127.0.0.1")
	if err != nil {
		log.Fatal(err)
	}
	peer, err := rpma.NewPeer(ctx)
	if err != nil {
		log.Fatal(err)
	}
	return peer
}

// waitOne waits for one completion of cq.
func waitOne(cq *rpma.CQ) rpma.Completion {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var c rpma.Completion
		err := cq.GetCompletion(&c)
		if err == nil {
			return c
		}
		if !errors.Is(err, rpma.ErrNoCompletion) {
			log.Fatal(err)
		}
		if err := cq.Wait(ctx); err != nil {
			log.Fatal(err)
		}
	}
}

// A client writes to a server's file-backed region and flushes it
// PERSISTENT: when the flush completes, the data is in the server's file.
func Example() {
	dir, _ := os.MkdirTemp("", "rpma")
	defer os.RemoveAll(dir)

	// Server: a region on a file, its descriptor and the peer configuration
	// in the private data.
	speer := examplePeer()
	m, err := rpma.MapFile(filepath.Join(dir, "pmem"), 4096)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	target, err := speer.RegMR(m.Bytes(), rpma.UsageWriteDst|rpma.UsageFlushTypePersistent)
	if err != nil {
		log.Fatal(err)
	}
	pcfg := rpma.NewPeerCfg()
	pcfg.SetDirectWriteToPmem(true)
	port, sconn := exampleServer(speer, nil, append(target.Descriptor(), pcfg.Descriptor()...), nil)

	// Client.
	cpeer := examplePeer()
	req, err := rpma.NewConnReq(cpeer, "127.0.0.1", port, nil)
	if err != nil {
		log.Fatal(err)
	}
	conn, err := req.Connect(context.Background(), nil)
	if err != nil {
		log.Fatal(err)
	}
	ev, _ := conn.NextEvent(context.Background())
	fmt.Println(ev)
	pd := conn.PrivateData()
	remote, _ := rpma.RemoteMRFromDescriptor(pd[:rpma.MRDescriptorSize])
	rcfg, _ := rpma.PeerCfgFromDescriptor(pd[rpma.MRDescriptorSize : rpma.MRDescriptorSize+1])
	conn.ApplyRemotePeerCfg(rcfg)

	src, _ := cpeer.RegMR([]byte("persistent hello"), rpma.UsageWriteSrc)
	conn.Write(remote, 0, src, 0, src.Size(), rpma.CompletionOnError, 1)
	conn.Flush(remote, 0, src.Size(), rpma.FlushPersistent, rpma.CompletionAlways, 2)
	c := waitOne(conn.CQ())
	fmt.Println(c.Op, c.OpContext, c.Status)

	data, _ := os.ReadFile(filepath.Join(dir, "pmem"))
	fmt.Printf("%s\n", data[:16])

	conn.Disconnect()
	conn.Delete()
	s := <-sconn
	s.Delete()
	src.Dereg()
	target.Dereg()
	cpeer.Delete()
	speer.Delete()
	// Output:
	// RPMA_CONN_ESTABLISHED
	// FLUSH 2 success
	// persistent hello
}

// Messages: the server pre-posts a receive on the request, the client
// sends with immediate data.
func ExampleConn_SendWithImm() {
	speer := examplePeer()
	rbuf, _ := speer.RegMR(make([]byte, 64), rpma.UsageRecv)
	port, sconn := exampleServer(speer, nil, nil, func(r *rpma.ConnReq) {
		r.Recv(rbuf, 0, 64, 7)
	})
	cpeer := examplePeer()
	req, _ := rpma.NewConnReq(cpeer, "127.0.0.1", port, nil)
	conn, err := req.Connect(context.Background(), nil)
	if err != nil {
		log.Fatal(err)
	}
	s := <-sconn
	msg, _ := cpeer.RegMR([]byte("ping"), rpma.UsageSend)
	conn.SendWithImm(msg, 0, 4, 42, rpma.CompletionOnError, 0)
	c := waitOne(s.CQ())
	fmt.Println(c.Op, c.OpContext, c.ByteLen, c.Imm, string(rbuf.Bytes()[:c.ByteLen]))

	conn.Disconnect()
	conn.Delete()
	s.Delete()
	msg.Dereg()
	rbuf.Dereg()
	cpeer.Delete()
	speer.Delete()
	// Output: RECV 7 4 42 ping
}

// GetWC returns verbs work completions: the op context is the WRID.
func ExampleCQ_GetWC() {
	speer := examplePeer()
	src, _ := speer.RegMR([]byte("remote data"), rpma.UsageReadSrc)
	port, sconn := exampleServer(speer, nil, src.Descriptor(), nil)
	cpeer := examplePeer()
	req, _ := rpma.NewConnReq(cpeer, "127.0.0.1", port, nil)
	conn, err := req.Connect(context.Background(), nil)
	if err != nil {
		log.Fatal(err)
	}
	remote, _ := rpma.RemoteMRFromDescriptor(conn.PrivateData()[:rpma.MRDescriptorSize])
	dst, _ := cpeer.RegMR(make([]byte, 16), rpma.UsageReadDst)
	conn.Read(dst, 0, remote, 0, 11, rpma.CompletionAlways, 0xABC)
	var wc [4]verbs.WC
	for {
		n, err := conn.CQ().GetWC(wc[:])
		if errors.Is(err, rpma.ErrNoCompletion) {
			conn.CQ().Wait(context.Background())
			continue
		}
		fmt.Printf("%d %#x %v %v %d %s\n", n, wc[0].WRID, wc[0].Opcode, wc[0].Status, wc[0].ByteLen, dst.Bytes()[:11])
		break
	}
	conn.Disconnect()
	conn.Delete()
	s := <-sconn
	s.Delete()
	dst.Dereg()
	src.Dereg()
	cpeer.Delete()
	speer.Delete()
	// Output: 1 0xabc RDMA_READ success 11 remote data
}

// Errors wrap librpma's codes: test them with errors.Is.
func ExampleCode() {
	_, err := rpma.RemoteMRFromDescriptor(make([]byte, 5))
	fmt.Println(errors.Is(err, rpma.ErrInval), rpma.Code(err), rpma.ErrString(rpma.Code(err)))
	// Output: true -100004 Invalid argument
}

// Logging goes through log/slog with librpma's thresholds.
func ExampleSetLogThreshold() {
	rpma.SetLogger(slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})))
	defer rpma.SetLogger(nil)
	rpma.SetLogThreshold(rpma.ThresholdPrimary, rpma.LogDebug)
	defer rpma.SetLogThreshold(rpma.ThresholdPrimary, rpma.LogWarning)
	l, _ := rpma.LogThreshold(rpma.ThresholdPrimary)
	fmt.Println(l, l.SlogLevel())
	// Output: DEBUG DEBUG
}

// A peer configuration travels as one byte.
func ExamplePeerCfg_Descriptor() {
	cfg := rpma.NewPeerCfg()
	cfg.SetDirectWriteToPmem(true)
	d := cfg.Descriptor()
	back, _ := rpma.PeerCfgFromDescriptor(d)
	fmt.Println(d, back.DirectWriteToPmem())
	// Output: [1] true
}

// A region descriptor is librpma's 21 bytes.
func ExampleMR_Descriptor() {
	peer := examplePeer()
	mr, _ := peer.RegMR(make([]byte, 4096), rpma.UsageReadSrc|rpma.UsageWriteDst)
	d := mr.Descriptor()
	r, _ := rpma.RemoteMRFromDescriptor(d)
	fmt.Println(len(d), r.Size(), r.Usage())
	mr.Dereg()
	peer.Delete()
	// Output: 21 4096 READ_SRC|WRITE_DST
}
