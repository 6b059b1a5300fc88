// Command 12-receive-completion-queue is the Go counterpart of librpma's
// example 12-receive-completion-queue: the ping-pong of example 08, with
// receives completing on a separate receive CQ on both sides (sends on the
// main CQ).
//
//	12-receive-completion-queue server [-a ADDR] [-p PORT]
//	12-receive-completion-queue client [-a ADDR] [-p PORT] <start_value> <rounds>
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"

	"github.com/goverbs/goverbs/examples/rpma/internal/common"
	"github.com/goverbs/goverbs/rpma"
	"github.com/goverbs/goverbs/verbs"
)

func main() {
	os.Exit(common.Main("12-receive-completion-queue", "<start_value> <rounds> (client)", server, client, os.Args[1:], os.Stdout))
}

const (
	msgSize = 8
	rcqSize = 10
)

func setup(o *common.Opts, addr string) (peer *rpma.Peer, recv, send *rpma.MR, cfg *rpma.ConnCfg, err error) {
	if peer, err = common.NewPeer(addr); err != nil {
		return
	}
	if recv, err = peer.RegMR(make([]byte, msgSize), rpma.UsageRecv); err != nil {
		peer.Delete()
		return
	}
	if send, err = peer.RegMR(make([]byte, msgSize), rpma.UsageSend); err != nil {
		recv.Dereg()
		peer.Delete()
		return
	}
	cfg = o.ConnCfg(nil)
	err = cfg.SetRCQSize(rcqSize)
	return
}

// recvValue waits for the receive on rcq and returns the value received.
func recvValue(ctx context.Context, rcq *rpma.CQ, recv *rpma.MR) (uint64, error) {
	wc, err := common.WaitWC(ctx, rcq, int(verbs.WCRecv))
	if err != nil {
		return 0, fmt.Errorf("rpma_recv(): %w", err)
	}
	if wc.ByteLen != msgSize {
		return 0, fmt.Errorf("received %d bytes", wc.ByteLen)
	}
	return binary.LittleEndian.Uint64(recv.Bytes()), nil
}

func server(ctx context.Context, o *common.Opts, _ []string) error {
	peer, recv, send, cfg, err := setup(o, o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	defer recv.Dereg()
	defer send.Dereg()
	ep, err := o.Listen(peer)
	if err != nil {
		return err
	}
	defer ep.Shutdown()
	req, err := ep.NextConnReq(ctx, cfg)
	if err != nil {
		return err
	}
	if err := req.Recv(recv, 0, msgSize, 1); err != nil {
		req.Delete()
		return err
	}
	conn, err := common.ConnectReq(ctx, req, nil)
	if err != nil {
		return err
	}
	defer conn.Delete()
	for {
		v, err := recvValue(ctx, conn.RCQ(), recv)
		if err != nil {
			return err
		}
		if v == common.IMDone {
			break
		}
		o.Printf("SERVER: Value received: %d\n", v)
		if err := conn.Recv(recv, 0, msgSize, 1); err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(send.Bytes(), v+1)
		o.Printf("SERVER: Value sent: %d\n", v+1)
		if err := conn.Send(send, 0, msgSize, rpma.CompletionAlways, 2); err != nil {
			return err
		}
		if _, err := common.WaitWC(ctx, conn.CQ(), int(verbs.WCSend)); err != nil {
			return fmt.Errorf("rpma_send(): %w", err)
		}
	}
	return common.WaitForCloseAndDisconnect(ctx, conn)
}

func client(ctx context.Context, o *common.Opts, args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: client <start_value> <rounds>")
	}
	counter, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		return err
	}
	rounds, err := strconv.ParseUint(args[1], 10, 64)
	if err != nil {
		return err
	}
	peer, recv, send, cfg, err := setup(o, o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	defer recv.Dereg()
	defer send.Dereg()
	conn, err := common.ClientConnect(ctx, peer, o, cfg, nil)
	if err != nil {
		return err
	}
	defer conn.Delete()
	for ; rounds > 1; rounds-- {
		if err := conn.Recv(recv, 0, msgSize, 1); err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(send.Bytes(), counter)
		o.Printf("CLIENT: Value sent: %d\n", counter)
		if err := conn.Send(send, 0, msgSize, rpma.CompletionAlways, 2); err != nil {
			return err
		}
		if _, err := common.WaitWC(ctx, conn.CQ(), int(verbs.WCSend)); err != nil {
			return fmt.Errorf("rpma_send(): %w", err)
		}
		if counter, err = recvValue(ctx, conn.RCQ(), recv); err != nil {
			return err
		}
		o.Printf("CLIENT: Value received: %d\n", counter)
	}
	binary.LittleEndian.PutUint64(send.Bytes(), common.IMDone)
	if err := conn.Send(send, 0, msgSize, rpma.CompletionOnError, 3); err != nil {
		return err
	}
	return common.DisconnectAndWaitForClose(ctx, conn)
}
