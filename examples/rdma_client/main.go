// Command rdma_client is the Go counterpart of librdmacm's rdma_client
// example, and speaks its protocol: it connects to rdma_server (port 7471),
// sends 16 bytes (inline when the QP allows it) and waits for 16 bytes back.
// It works against librdmacm's rdma_server on a Linux siw device, and
// against the Go rdma_server.
//
//	rdma_client [-s SERVER] [-p PORT]
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

func main() {
	server := flag.String("s", "127.0.0.1", "server address (roce://ADDR: over RoCEv2)")
	port := flag.String("p", "7471", "port")
	timeout := flag.Duration("t", 30*time.Second, "timeout (goverbs addition)")
	flag.Parse()
	fmt.Println("rdma_client: start")
	err := run(withPort(*server, *port), *timeout)
	ret := 0
	if err != nil {
		fmt.Fprintln(os.Stderr, "rdma_client:", err)
		ret = -1
	}
	fmt.Printf("rdma_client: end %d\n", ret)
	if err != nil {
		os.Exit(1)
	}
}

func run(addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	attr := verbs.QPInitAttr{QPType: verbs.QPTRC, SQSigAll: true,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 16}}
	id, err := rdmacm.CreateEP(addr, false, nil, &attr)
	if err != nil {
		return fmt.Errorf("rdma_create_ep: %w", err)
	}
	defer id.Close()

	var sendFlags verbs.SendFlags
	qa, _, err := id.QP().Query()
	if err != nil {
		return err
	}
	if qa.Cap.MaxInlineData >= 16 {
		sendFlags = verbs.SendInline
	} else {
		fmt.Println("rdma_client: device doesn't support IBV_SEND_INLINE, using sge sends")
	}
	sendMsg, recvMsg := make([]byte, 16), make([]byte, 16)
	mr, err := id.RegMsgs(recvMsg)
	if err != nil {
		return fmt.Errorf("rdma_reg_msgs for recv_msg: %w", err)
	}
	defer mr.Dereg()
	var sendMR *verbs.MR
	if sendFlags&verbs.SendInline == 0 {
		if sendMR, err = id.RegMsgs(sendMsg); err != nil {
			return fmt.Errorf("rdma_reg_msgs for send_msg: %w", err)
		}
		defer sendMR.Dereg()
	}
	if err := id.PostRecv(0, recvMsg, mr); err != nil {
		return fmt.Errorf("rdma_post_recv: %w", err)
	}
	if err := id.Connect(ctx, nil); err != nil {
		return fmt.Errorf("rdma_connect: %w", err)
	}
	if err := id.PostSend(0, sendMsg, sendMR, sendFlags); err != nil {
		return fmt.Errorf("rdma_post_send: %w", err)
	}
	if wc, err := id.GetSendComp(ctx); err != nil || wc.Status != verbs.WCSuccess {
		return fmt.Errorf("rdma_get_send_comp: %v %v", wc.Status, err)
	}
	if wc, err := id.GetRecvComp(ctx); err != nil || wc.Status != verbs.WCSuccess {
		return fmt.Errorf("rdma_get_recv_comp: %v %v", wc.Status, err)
	}
	return id.Disconnect()
}

// withPort adds the port to an address, after its scheme if it has one
// (roce://10.0.0.1 and 7471 make roce://10.0.0.1:7471).
func withPort(addr, port string) string {
	scheme, host, ok := strings.Cut(addr, "://")
	if !ok {
		return net.JoinHostPort(addr, port)
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}
