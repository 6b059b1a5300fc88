// Command 11-write-with-imm is the Go counterpart of librpma's example
// 11-write-with-imm: the client writes a value to the server's memory
// together with immediate data; the server's receive completes with the
// immediate value, which it checks against what was written. Immediate
// data needs goverbs' extensions on both sides (siw has none).
//
//	11-write-with-imm server [-a ADDR] [-p PORT]
//	11-write-with-imm client [-a ADDR] [-p PORT] <imm>
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
	os.Exit(common.Main("11-write-with-imm", "<imm> (client)", server, client, os.Args[1:], os.Stdout))
}

const kilobyte = 1024

func server(ctx context.Context, o *common.Opts, _ []string) error {
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	dst, err := peer.RegMR(make([]byte, kilobyte), rpma.UsageWriteDst)
	if err != nil {
		return err
	}
	defer dst.Dereg()
	recv, err := peer.RegMR(make([]byte, 1), rpma.UsageRecv)
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
	if err := req.Recv(recv, 0, 1, 0); err != nil {
		req.Delete()
		return err
	}
	conn, err := common.ConnectReq(ctx, req, common.Data{MRDesc: dst.Descriptor()}.Encode())
	if err != nil {
		return err
	}
	defer conn.Delete()
	wc, err := common.WaitWC(ctx, conn.CQ(), int(verbs.WCRecvRDMAWithImm))
	if err != nil {
		return err
	}
	exp := binary.LittleEndian.Uint32(dst.Bytes())
	if wc.ImmData != exp {
		return fmt.Errorf("received immediate data %d, the value written is %d", wc.ImmData, exp)
	}
	o.Printf("The value '%d' was written together with immediate data '%d'\n", exp, wc.ImmData)
	return common.WaitForCloseAndDisconnect(ctx, conn)
}

func client(ctx context.Context, o *common.Opts, args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("usage: client <imm>")
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
	src, err := peer.RegMR(make([]byte, kilobyte), rpma.UsageWriteSrc)
	if err != nil {
		return err
	}
	defer src.Dereg()
	conn, err := common.ClientConnect(ctx, peer, o, nil, nil)
	if err != nil {
		return err
	}
	defer conn.Delete()
	data, err := common.DecodeData(conn.PrivateData())
	if err != nil {
		return err
	}
	dst, err := rpma.RemoteMRFromDescriptor(data.MRDesc)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(src.Bytes(), uint32(imm))
	o.Printf("Writing value '%d' with immediate data '%d'\n", imm, imm)
	if err := conn.WriteWithImm(dst, int(data.DataOffset), src, 0, kilobyte, uint32(imm), rpma.CompletionAlways, 0); err != nil {
		return err
	}
	if _, err := common.WaitWC(ctx, conn.CQ(), int(verbs.WCRDMAWrite)); err != nil {
		return err
	}
	return common.DisconnectAndWaitForClose(ctx, conn)
}
