// Command 05-flush-to-persistent is the Go counterpart of librpma's example
// 05-flush-to-persistent: the server exposes its memory (a file mapping
// when given one) and its peer configuration; the client writes its
// greeting there and flushes it, PERSISTENT when the server declares direct
// write to persistent memory and the region allows it, VISIBILITY
// otherwise. Between goverbs peers the flush is native: a PERSISTENT flush
// completes after the server has written the range back to its file.
//
//	05-flush-to-persistent server [-a ADDR] [-p PORT] [<pmem-path> [on|off]]
//	05-flush-to-persistent client [-a ADDR] [-p PORT] [<pmem-path>]
//
// The server's "on" declares direct write to persistent memory (it needs a
// pmem-path).
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
	os.Exit(common.Main("05-flush-to-persistent", "[<pmem-path> [on|off]]", server, client, os.Args[1:], os.Stdout))
}

const flushID = 0xF01D

func server(ctx context.Context, o *common.Opts, args []string) error {
	path := ""
	if len(args) > 0 {
		path = args[0]
	}
	mem, err := common.MapWithSignature(path, common.HelloStrSize, nil)
	if err != nil {
		return err
	}
	defer mem.Close()
	if s := common.CString(mem.Buf[mem.DataOffset:]); s != "" {
		o.Printf("Old value: %s\n", s)
	}
	pcfg := rpma.NewPeerCfg()
	pcfg.SetDirectWriteToPmem(mem.IsPmem && len(args) > 1 && args[1] == "on")
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
	usage := rpma.UsageWriteDst | rpma.UsageFlushTypeVisibility
	if mem.IsPmem {
		usage |= rpma.UsageFlushTypePersistent
	}
	mr, err := peer.RegMR(mem.Buf, usage)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	data := common.Data{DataOffset: uint16(mem.DataOffset), MRDesc: mr.Descriptor(), PcfgDesc: pcfg.Descriptor()}
	conn, err := common.ServerAccept(ctx, ep, o.ConnCfg(nil), data.Encode())
	if err != nil {
		return err
	}
	if err := common.WaitForCloseAndDisconnect(ctx, conn); err != nil {
		return err
	}
	o.Printf("New value: %s\n", common.CString(mem.Buf[mem.DataOffset:]))
	return nil
}

func client(ctx context.Context, o *common.Opts, args []string) error {
	path := ""
	if len(args) > 0 {
		path = args[0]
	}
	mem, err := common.MapWithSignature(path, common.HelloSize, common.InitHello)
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
	conn, err := common.ClientConnect(ctx, peer, o, nil, nil)
	if err != nil {
		return err
	}
	defer conn.Delete()
	data, err := common.DecodeData(conn.PrivateData())
	if err != nil {
		return err
	}
	pcfg, err := rpma.PeerCfgFromDescriptor(data.PcfgDesc)
	if err != nil {
		return err
	}
	if err := conn.ApplyRemotePeerCfg(pcfg); err != nil {
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
	typ := rpma.FlushVisibility
	if pcfg.DirectWriteToPmem() && dst.SupportsFlush(rpma.FlushPersistent) {
		o.Printf("RPMA_FLUSH_TYPE_PERSISTENT is supported\n")
		typ = rpma.FlushPersistent
	} else {
		o.Printf("RPMA_FLUSH_TYPE_PERSISTENT is NOT supported, RPMA_FLUSH_TYPE_VISIBILITY is used instead\n")
	}
	if err := conn.Flush(dst, off, common.HelloStrSize, typ, rpma.CompletionAlways, flushID); err != nil {
		return err
	}
	wc, err := common.WaitWC(ctx, conn.CQ(), -1)
	if err != nil {
		return err
	}
	if wc.WRID != flushID || (wc.Opcode != verbs.WCFlush && wc.Opcode != verbs.WCRDMARead) {
		return fmt.Errorf("unexpected completion %#x %v", wc.WRID, wc.Opcode)
	}
	common.Translate(hello)
	if err := mem.Persist(mem.DataOffset, common.HelloSize); err != nil {
		return err
	}
	o.Printf("Translation: %s\n", common.HelloString(hello))
	return common.DisconnectAndWaitForClose(ctx, conn)
}
