package rpma_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/goverbs/goverbs/rpma"
)

// A server takes connection requests from its endpoint; a request it deletes
// is rejected, and the client's connection reports it as its first event.
func ExampleEp_NextConnReq() {
	speer := examplePeer()
	ep, err := speer.Listen("127.0.0.1", "0")
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, err := ep.NextConnReq(context.Background(), nil)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("request with %q\n", req.PrivateData())
		req.Delete() // reject
	}()
	cpeer := examplePeer()
	req, _ := rpma.NewConnReq(cpeer, "127.0.0.1", ep.Port(), nil)
	conn, err := req.Connect(context.Background(), []byte("hi"))
	if err != nil {
		log.Fatal(err)
	}
	<-done
	ev, _ := conn.NextEvent(context.Background())
	fmt.Println(ev)
	conn.Delete()
	ep.Shutdown()
	cpeer.Delete()
	speer.Delete()
	// Output:
	// request with "hi"
	// RPMA_CONN_REJECTED
}

// A connection whose receives complete on a receive CQ, waiting on both CQs
// through one shared completion channel.
func ExampleConn_Wait() {
	speer := examplePeer()
	sbuf, _ := speer.RegMR([]byte("msg"), rpma.UsageSend)
	port, sconn := exampleServer(speer, nil, nil, nil)
	cpeer := examplePeer()
	rbuf, _ := cpeer.RegMR(make([]byte, 16), rpma.UsageRecv)
	cfg := rpma.NewConnCfg()
	cfg.SetRCQSize(8)
	cfg.SetCompChannel(true)
	req, _ := rpma.NewConnReq(cpeer, "127.0.0.1", port, cfg)
	req.Recv(rbuf, 0, 16, 1)
	conn, err := req.Connect(context.Background(), nil)
	if err != nil {
		log.Fatal(err)
	}
	s := <-sconn
	s.Send(sbuf, 0, 3, rpma.CompletionOnError, 0)
	cq, isRCQ, err := conn.Wait(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	var c rpma.Completion
	for cq.GetCompletion(&c) != nil {
		conn.Wait(context.Background())
	}
	fmt.Println(isRCQ, c.Op, string(rbuf.Bytes()[:c.ByteLen]))
	conn.Disconnect()
	conn.Delete()
	s.Delete()
	rbuf.Dereg()
	sbuf.Dereg()
	cpeer.Delete()
	speer.Delete()
	// Output: true RECV msg
}

// A shared receive queue with its own receive CQ serves every connection
// configured with it.
func ExampleSRQ() {
	speer := examplePeer()
	srq, err := speer.NewSRQ(nil)
	if err != nil {
		log.Fatal(err)
	}
	rbuf, _ := speer.RegMR(make([]byte, 64), rpma.UsageRecv)
	srq.Recv(rbuf, 0, 64, 5)
	cfg := rpma.NewConnCfg()
	cfg.SetSRQ(srq)
	port, sconn := exampleServer(speer, cfg, nil, nil)
	cpeer := examplePeer()
	req, _ := rpma.NewConnReq(cpeer, "127.0.0.1", port, nil)
	conn, err := req.Connect(context.Background(), nil)
	if err != nil {
		log.Fatal(err)
	}
	s := <-sconn
	msg, _ := cpeer.RegMR([]byte("to the SRQ"), rpma.UsageSend)
	conn.Send(msg, 0, msg.Size(), rpma.CompletionOnError, 0)
	c := waitOne(srq.RCQ())
	fmt.Println(c.Op, c.OpContext, string(rbuf.Bytes()[:c.ByteLen]))
	conn.Disconnect()
	conn.Delete()
	s.Delete()
	srq.Delete()
	msg.Dereg()
	rbuf.Dereg()
	cpeer.Delete()
	speer.Delete()
	// Output: RECV 5 to the SRQ
}

// A region on a file: its bytes are the file's.
func ExampleMapFile() {
	dir, _ := os.MkdirTemp("", "rpma")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "pmem")
	m, err := rpma.MapFile(path, 4096)
	if err != nil {
		log.Fatal(err)
	}
	copy(m.Bytes(), "durable")
	m.Sync(0, 7)
	m.Close()
	b, _ := os.ReadFile(path)
	fmt.Println(len(b), string(b[:7]))
	// Output: 4096 durable
}
