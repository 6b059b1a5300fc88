package shm_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// Two processes' worth of RDMA over shared memory, through rdmacm with a
// unix: address: the server offers a region of memory from AllocBuffer in
// its accept's private data; the client writes into it and reads it back
// without the server's CPU taking part.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := fmt.Sprintf("unix:@goverbs-example-%d", time.Now().UnixNano())
	ln, err := rdmacm.Listen(addr)
	if err != nil {
		panic(err)
	}
	defer ln.Close()

	served := make(chan struct{})
	go func() {
		req, err := ln.GetRequest(ctx)
		if err != nil {
			panic(err)
		}
		defer req.Close()
		req.CreateQP(nil, verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		buf, _ := verbs.AllocBuffer(4096) // a memfd: the client maps it
		defer buf.Free()
		mr, _ := req.PD().RegMR(buf.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		defer mr.Dereg()
		desc := binary.LittleEndian.AppendUint64(nil, mr.RemoteAddr(0))
		desc = binary.LittleEndian.AppendUint32(desc, mr.RKey())
		if err := req.Accept(ctx, &rdmacm.ConnParam{PrivateData: desc, ResponderResources: 1}); err != nil {
			panic(err)
		}
		<-req.Done() // the client disconnects when it is done
		fmt.Printf("server: my memory holds %q\n", buf.Bytes()[:20])
		close(served)
	}()

	id, err := rdmacm.Dial(ctx, addr, &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}},
		&rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1})
	if err != nil {
		panic(err)
	}
	defer id.Close()
	raddr, rkey := binary.LittleEndian.Uint64(id.PrivateData()), binary.LittleEndian.Uint32(id.PrivateData()[8:])

	msg := []byte("hello, shared memory")
	wmr, _ := id.RegMsgs(msg)
	defer wmr.Dereg()
	id.PostWrite(1, msg, wmr, verbs.SendSignaled, raddr, rkey)
	wc, _ := id.GetSendComp(ctx)
	fmt.Println("client: write", wc.Status)

	back := make([]byte, 5)
	rmr, _ := id.RegRead(back)
	defer rmr.Dereg()
	id.PostRead(2, back, rmr, verbs.SendSignaled, raddr+7, rkey)
	wc, _ = id.GetSendComp(ctx)
	fmt.Printf("client: read %v %q\n", wc.Status, back)
	id.Disconnect()
	<-served
	// Output:
	// client: write success
	// client: read success "share"
	// server: my memory holds "hello, shared memory"
}

// The two kinds of address of the package doc's opening lines: a listener
// at an abstract socket name, and a client of a listener at a path. (It
// has no output, so go test compiles it without running it: nobody
// listens at /run/my.sock.)
func Example_addresses() {
	ctx := context.Background()
	ln, err := rdmacm.Listen("unix:@my-service") // an abstract socket name
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	id, err := rdmacm.Dial(ctx, "unix:/run/my.sock", nil, nil) // or a path
	if err != nil {
		panic(err)
	}
	defer id.Close()
}
