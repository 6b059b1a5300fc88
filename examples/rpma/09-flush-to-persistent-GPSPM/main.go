// Command 09-flush-to-persistent-GPSPM is the Go counterpart of librpma's
// example 09-flush-to-persistent-GPSPM (the General Purpose Server
// Persistency Method): the client writes its greeting to the server's
// memory (a file mapping when given one), then sends a GPSPM flush request
// (protobuf, as librpma's GPSPM_flush.proto) naming the range; the server
// persists the range itself and answers with a flush response. Receives
// complete on receive CQs.
//
//	09-flush-to-persistent-GPSPM server [-a ADDR] [-p PORT] [<pmem-path>]
//	09-flush-to-persistent-GPSPM client [-a ADDR] [-p PORT] [<pmem-path>]
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/goverbs/goverbs/examples/rpma/internal/common"
	"github.com/goverbs/goverbs/rpma"
	"github.com/goverbs/goverbs/verbs"
)

func main() {
	os.Exit(common.Main("09-flush-to-persistent-GPSPM", "[<pmem-path>]", server, client, os.Args[1:], os.Stdout))
}

const (
	msgSizeMax = 512
	sendOffset = 0
	recvOffset = sendOffset + msgSizeMax
	rcqSize    = 1
	flushID    = 0xF01D
)

func connCfg(o *common.Opts) *rpma.ConnCfg {
	cfg := o.ConnCfg(nil)
	cfg.SetRCQSize(rcqSize)
	return cfg
}

func server(ctx context.Context, o *common.Opts, args []string) error {
	mem, err := common.MapWithSignature(common.PmemPath(args), common.HelloStrSize, nil)
	if err != nil {
		return err
	}
	defer mem.Close()
	if s := common.CString(mem.Buf[mem.DataOffset:]); s != "" {
		o.Printf("Old value: %s\n", s)
	}
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
	mr, err := peer.RegMR(mem.Buf, rpma.UsageWriteDst)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	msg, err := peer.RegMR(make([]byte, common.HelloStrSize), rpma.UsageSend|rpma.UsageRecv)
	if err != nil {
		return err
	}
	defer msg.Dereg()
	req, err := ep.NextConnReq(ctx, connCfg(o))
	if err != nil {
		return err
	}
	if err := req.Recv(msg, recvOffset, msgSizeMax, 0); err != nil {
		req.Delete()
		return err
	}
	conn, err := common.ConnectReq(ctx, req, common.Data{DataOffset: uint16(mem.DataOffset), MRDesc: mr.Descriptor()}.Encode())
	if err != nil {
		return err
	}
	defer conn.Delete()
	wc, err := common.WaitWC(ctx, conn.RCQ(), int(verbs.WCRecv))
	if err != nil {
		return err
	}
	fr, err := common.DecodeFlushRequest(msg.Bytes()[recvOffset : recvOffset+int(wc.ByteLen)])
	if err != nil {
		return err
	}
	o.Printf("Flush request received: {offset: 0x%X, length: 0x%X, op_context: 0x%X}\n", fr.Offset, fr.Length, fr.OpContext)
	if fr.Offset > uint64(len(mem.Buf)) || fr.Length > uint64(len(mem.Buf))-fr.Offset {
		return fmt.Errorf("flush request outside the region")
	}
	if err := mem.Persist(int(fr.Offset), int(fr.Length)); err != nil {
		return err
	}
	resp := common.EncodeFlushResponse(fr.OpContext)
	copy(msg.Bytes()[sendOffset:], resp)
	if err := conn.Send(msg, sendOffset, len(resp), rpma.CompletionAlways, 0); err != nil {
		return err
	}
	if _, err := common.WaitWC(ctx, conn.CQ(), int(verbs.WCSend)); err != nil {
		return err
	}
	if err := common.WaitForCloseAndDisconnect(ctx, conn); err != nil {
		return err
	}
	o.Printf("New value: %s\n", common.CString(mem.Buf[mem.DataOffset:]))
	return nil
}

func client(ctx context.Context, o *common.Opts, args []string) error {
	mem, err := common.MapWithSignature(common.PmemPath(args), common.HelloSize, common.InitHello)
	if err != nil {
		return err
	}
	defer mem.Close()
	hello := mem.Buf[mem.DataOffset:]
	if !mem.IsPmem {
		common.InitHello(hello)
	}
	o.Printf("Next value: %s\n", common.HelloString(hello))
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	src, err := peer.RegMR(mem.Buf, rpma.UsageWriteSrc)
	if err != nil {
		return err
	}
	defer src.Dereg()
	msg, err := peer.RegMR(make([]byte, common.HelloStrSize), rpma.UsageSend|rpma.UsageRecv)
	if err != nil {
		return err
	}
	defer msg.Dereg()
	conn, err := common.ClientConnect(ctx, peer, o, connCfg(o), nil)
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
	off := int(data.DataOffset)
	if dst.Size() < uint64(off+common.HelloStrSize) {
		return fmt.Errorf("remote region too small")
	}
	if err := conn.Write(dst, off, src, mem.DataOffset+common.HelloStrOffset, common.HelloStrSize, rpma.CompletionOnError, 0); err != nil {
		return err
	}
	if err := conn.Recv(msg, recvOffset, msgSizeMax, 0); err != nil {
		return err
	}
	req := common.FlushRequest{Offset: uint64(off), Length: common.HelloStrSize, OpContext: flushID}.Encode()
	copy(msg.Bytes()[sendOffset:], req)
	if err := conn.Send(msg, sendOffset, len(req), rpma.CompletionAlways, 0); err != nil {
		return err
	}
	if _, err := common.WaitWC(ctx, conn.CQ(), int(verbs.WCSend)); err != nil {
		return err
	}
	wc, err := common.WaitWC(ctx, conn.RCQ(), int(verbs.WCRecv))
	if err != nil {
		return err
	}
	opCtx, err := common.DecodeFlushResponse(msg.Bytes()[recvOffset : recvOffset+int(wc.ByteLen)])
	if err != nil {
		return err
	}
	if opCtx != flushID {
		return fmt.Errorf("unexpected flush response op_context 0x%X", opCtx)
	}
	common.Translate(hello)
	if err := mem.Persist(mem.DataOffset, common.HelloSize); err != nil {
		return err
	}
	o.Printf("Translation: %s\n", common.HelloString(hello))
	return common.DisconnectAndWaitForClose(ctx, conn)
}
