// Command 10-send-with-imm is the Go counterpart of librpma's example
// 10-send-with-imm: the client tells the server the immediate value it will
// send (4 bytes of private data, host order), then sends a word (or
// nothing) with that immediate value; the server checks it. Immediate data
// needs goverbs' extensions on both sides (siw has none).
//
//	10-send-with-imm server [-a ADDR] [-p PORT]
//	10-send-with-imm client [-a ADDR] [-p PORT] <imm> [<word>]
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
	os.Exit(common.Main("10-send-with-imm", "<imm> [<word>] (client)", server, client, os.Args[1:], os.Stdout))
}

const kilobyte = 1024

func server(ctx context.Context, o *common.Opts, _ []string) error {
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	recv, err := peer.RegMR(make([]byte, kilobyte), rpma.UsageRecv)
	if err != nil {
		return err
	}
	defer recv.Dereg()
	ep, err := o.Listen(peer)
	if err != nil {
		return err
	}
	defer ep.Shutdown()
	req, err := ep.NextConnReq(ctx, o.ConnCfg(nil))
	if err != nil {
		return err
	}
	if err := req.Recv(recv, 0, kilobyte, 0); err != nil {
		req.Delete()
		return err
	}
	conn, err := common.ConnectReq(ctx, req, nil)
	if err != nil {
		return err
	}
	defer conn.Delete()
	pd := conn.PrivateData()
	if len(pd) < 4 {
		return fmt.Errorf("received connection's private data is too small (%d < 4)", len(pd))
	}
	exp := binary.LittleEndian.Uint32(pd)
	wc, err := common.WaitWC(ctx, conn.CQ(), int(verbs.WCRecv))
	if err != nil {
		return err
	}
	if wc.Flags&verbs.WCFlagWithImm == 0 || wc.ImmData != exp {
		return fmt.Errorf("received immediate data %d, expected %d", wc.ImmData, exp)
	}
	o.Printf("Received value '%s' with immediate data '%d'\n", common.CString(recv.Bytes()[:wc.ByteLen]), wc.ImmData)
	return common.WaitForCloseAndDisconnect(ctx, conn)
}

func client(ctx context.Context, o *common.Opts, args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("usage: client <imm> [<word>]")
	}
	imm, err := strconv.ParseUint(args[0], 10, 32)
	if err != nil {
		return fmt.Errorf("immediate data: %w", err)
	}
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	var send *rpma.MR
	n := 0
	if len(args) > 1 {
		buf := make([]byte, kilobyte)
		common.PutCString(buf, args[1])
		n = len(common.CString(buf)) + 1
		if send, err = peer.RegMR(buf, rpma.UsageSend); err != nil {
			return err
		}
		defer send.Dereg()
		o.Printf("Sending value '%s' with immediate data '%d'\n", args[1], imm)
	} else {
		o.Printf("Sending immediate data '%d'\n", imm)
	}
	pd := binary.LittleEndian.AppendUint32(nil, uint32(imm))
	conn, err := common.ClientConnect(ctx, peer, o, nil, pd)
	if err != nil {
		return err
	}
	defer conn.Delete()
	if err := conn.SendWithImm(send, 0, n, uint32(imm), rpma.CompletionAlways, 0); err != nil {
		return err
	}
	if _, err := common.WaitWC(ctx, conn.CQ(), int(verbs.WCSend)); err != nil {
		return err
	}
	return common.DisconnectAndWaitForClose(ctx, conn)
}
