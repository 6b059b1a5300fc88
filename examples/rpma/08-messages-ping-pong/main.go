// Command 08-messages-ping-pong is the Go counterpart of librpma's example
// 08-messages-ping-pong: the client sends a number, the server answers
// with the number plus one, for the given number of rounds; then the
// client sends I_M_DONE.
//
//	08-messages-ping-pong server [-a ADDR] [-p PORT]
//	08-messages-ping-pong client [-a ADDR] [-p PORT] <seed> <rounds>
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"

	"github.com/goverbs/goverbs/examples/rpma/internal/common"
	"github.com/goverbs/goverbs/rpma"
)

func main() {
	os.Exit(common.Main("08-messages-ping-pong", "<seed> <rounds> (client)", server, client, os.Args[1:], os.Stdout))
}

const msgSize = 8

func regMsgs(peer *rpma.Peer) (recv, send *rpma.MR, err error) {
	if recv, err = peer.RegMR(make([]byte, msgSize), rpma.UsageRecv); err != nil {
		return nil, nil, err
	}
	if send, err = peer.RegMR(make([]byte, msgSize), rpma.UsageSend); err != nil {
		recv.Dereg()
		return nil, nil, err
	}
	return recv, send, nil
}

func server(ctx context.Context, o *common.Opts, _ []string) error {
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	ep, err := o.Listen(peer)
	if err != nil {
		return err
	}
	defer ep.Shutdown()
	recv, send, err := regMsgs(peer)
	if err != nil {
		return err
	}
	defer recv.Dereg()
	defer send.Dereg()
	req, err := ep.NextConnReq(ctx, o.ConnCfg(nil))
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
	sendDone := true
	for {
		if err := common.WaitSendRecv(ctx, conn.CQ(), 1, sendDone); err != nil {
			return err
		}
		v := binary.LittleEndian.Uint64(recv.Bytes())
		if v == common.IMDone {
			break
		}
		o.Printf("Value received: %d\n", v)
		if err := conn.Recv(recv, 0, msgSize, 1); err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(send.Bytes(), v+1)
		o.Printf("Value sent: %d\n", v+1)
		if err := conn.Send(send, 0, msgSize, rpma.CompletionAlways, 2); err != nil {
			return err
		}
		sendDone = false
	}
	return common.WaitForCloseAndDisconnect(ctx, conn)
}

func client(ctx context.Context, o *common.Opts, args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: client <seed> <rounds>")
	}
	cntr, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		return err
	}
	rounds, err := strconv.ParseUint(args[1], 10, 64)
	if err != nil {
		return err
	}
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	recv, send, err := regMsgs(peer)
	if err != nil {
		return err
	}
	defer recv.Dereg()
	defer send.Dereg()
	conn, err := common.ClientConnect(ctx, peer, o, nil, nil)
	if err != nil {
		return err
	}
	defer conn.Delete()
	for ; rounds > 1; rounds-- {
		if err := conn.Recv(recv, 0, msgSize, 1); err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(send.Bytes(), cntr)
		o.Printf("Value sent: %d\n", cntr)
		if err := conn.Send(send, 0, msgSize, rpma.CompletionAlways, 2); err != nil {
			return err
		}
		if err := common.WaitSendRecv(ctx, conn.CQ(), 1, false); err != nil {
			return err
		}
		cntr = binary.LittleEndian.Uint64(recv.Bytes())
		o.Printf("Value received: %d\n", cntr)
	}
	binary.LittleEndian.PutUint64(send.Bytes(), common.IMDone)
	if err := conn.Send(send, 0, msgSize, rpma.CompletionOnError, 3); err != nil {
		return err
	}
	return common.DisconnectAndWaitForClose(ctx, conn)
}
