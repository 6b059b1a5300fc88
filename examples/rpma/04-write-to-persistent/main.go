// Command 04-write-to-persistent is the Go counterpart of librpma's example
// 04-write-to-persistent: the server exposes its memory (a file mapping
// when given one), the client writes its greeting there and reads 8 bytes
// back to make sure the write has reached the server's memory; the server
// then persists it.
//
//	04-write-to-persistent server [-a ADDR] [-p PORT] [<pmem-path>]
//	04-write-to-persistent client [-a ADDR] [-p PORT] [<pmem-path>]
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
	os.Exit(common.Main("04-write-to-persistent", "[<pmem-path>]", server, client, os.Args[1:], os.Stdout))
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
	mr, err := peer.RegMR(mem.Buf, rpma.UsageWriteDst|rpma.UsageReadSrc)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	data := common.Data{DataOffset: uint16(mem.DataOffset), MRDesc: mr.Descriptor()}
	conn, err := common.ServerAccept(ctx, ep, o.ConnCfg(nil), data.Encode())
	if err != nil {
		return err
	}
	if err := common.WaitForCloseAndDisconnect(ctx, conn); err != nil {
		return err
	}
	if err := mem.Persist(mem.DataOffset, common.HelloStrSize); err != nil {
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
	raw, err := peer.RegMR(make([]byte, 8), rpma.UsageReadDst)
	if err != nil {
		return err
	}
	defer raw.Dereg()
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
	off := int(data.DataOffset)
	if dst.Size() < uint64(off+common.HelloStrSize) {
		return fmt.Errorf("remote region too small (%d < %d)", dst.Size()-uint64(off), common.HelloStrSize)
	}
	if err := conn.Write(dst, off, src, mem.DataOffset+common.HelloStrOffset, common.HelloStrSize, rpma.CompletionOnError, 0); err != nil {
		return err
	}
	// A read after the write: its completion means the write has reached
	// the server's memory.
	if err := conn.Read(raw, 0, dst, 0, 8, rpma.CompletionAlways, 0); err != nil {
		return err
	}
	if _, err := common.WaitWC(ctx, conn.CQ(), int(verbs.WCRDMARead)); err != nil {
		return err
	}
	common.Translate(hello)
	if err := mem.Persist(mem.DataOffset, common.HelloSize); err != nil {
		return err
	}
	o.Printf("Translation: %s\n", common.HelloString(hello))
	return common.DisconnectAndWaitForClose(ctx, conn)
}
