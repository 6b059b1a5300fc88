// Command 03-read-to-persistent is the Go counterpart of librpma's example
// 03-read-to-persistent: the client exposes its greeting (a hello_t, from a
// file mapping when given one), the server reads it into its own memory
// (a file mapping when given one) and persists it; then the client
// translates its greeting for the next run.
//
//	03-read-to-persistent server [-a ADDR] [-p PORT] [<pmem-path>]
//	03-read-to-persistent client [-a ADDR] [-p PORT] [<pmem-path>]
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
	os.Exit(common.Main("03-read-to-persistent", "[<pmem-path>]", server, client, os.Args[1:], os.Stdout))
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
	dst, err := peer.RegMR(mem.Buf, rpma.UsageReadDst)
	if err != nil {
		return err
	}
	defer dst.Dereg()
	conn, err := common.ServerAccept(ctx, ep, o.ConnCfg(nil), nil)
	if err != nil {
		return err
	}
	defer conn.Delete()
	data, err := common.DecodeData(conn.PrivateData())
	if err != nil {
		return err
	}
	src, err := rpma.RemoteMRFromDescriptor(data.MRDesc)
	if err != nil {
		return err
	}
	if err := conn.Read(dst, mem.DataOffset, src, int(data.DataOffset), common.HelloStrSize, rpma.CompletionAlways, 0); err != nil {
		return err
	}
	if _, err := common.WaitWC(ctx, conn.CQ(), int(verbs.WCRDMARead)); err != nil {
		return err
	}
	if err := mem.Persist(mem.DataOffset, common.HelloStrSize); err != nil {
		return err
	}
	o.Printf("New value: %s\n", common.CString(mem.Buf[mem.DataOffset:]))
	return common.DisconnectAndWaitForClose(ctx, conn)
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
	mr, err := peer.RegMR(mem.Buf, rpma.UsageReadSrc)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	data := common.Data{DataOffset: uint16(mem.DataOffset + common.HelloStrOffset), MRDesc: mr.Descriptor()}
	conn, err := common.ClientConnect(ctx, peer, o, nil, data.Encode())
	if err != nil {
		return err
	}
	if err := common.WaitForCloseAndDisconnect(ctx, conn); err != nil {
		return fmt.Errorf("waiting for the server: %w", err)
	}
	common.Translate(hello)
	if err := mem.Persist(mem.DataOffset, common.HelloSize); err != nil {
		return err
	}
	o.Printf("Translation: %s\n", common.HelloString(hello))
	return nil
}
