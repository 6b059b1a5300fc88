// Command 02-read-to-volatile is the Go counterpart of librpma's example
// 02-read-to-volatile: the server exposes a greeting (its region
// descriptor in the private data, as struct common_data) and the client
// reads it into its volatile memory.
//
//	02-read-to-volatile server [-a ADDR] [-p PORT]
//	02-read-to-volatile client [-a ADDR] [-p PORT]
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
	os.Exit(common.Main("02-read-to-volatile", "", server, client, os.Args[1:], os.Stdout))
}

const helloStr = "Hello client!\x00"

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
	mr, err := peer.RegMR([]byte(helloStr), rpma.UsageReadSrc)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	data := common.Data{MRDesc: mr.Descriptor()}
	conn, err := common.ServerAccept(ctx, ep, o.ConnCfg(nil), data.Encode())
	if err != nil {
		return err
	}
	return common.WaitForCloseAndDisconnect(ctx, conn)
}

func client(ctx context.Context, o *common.Opts, _ []string) error {
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	dst, err := peer.RegMR(make([]byte, 1024), rpma.UsageReadDst)
	if err != nil {
		return err
	}
	defer dst.Dereg()
	conn, err := common.ClientConnect(ctx, peer, o, nil, nil)
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
	if src.Size() > uint64(dst.Size()) {
		return fmt.Errorf("remote region of %d bytes does not fit %d", src.Size(), dst.Size())
	}
	if err := conn.Read(dst, 0, src, 0, int(src.Size()), rpma.CompletionAlways, 0); err != nil {
		return err
	}
	if _, err := common.WaitWC(ctx, conn.CQ(), int(verbs.WCRDMARead)); err != nil {
		return err
	}
	o.Printf("Read a message: %s\n", common.CString(dst.Bytes()))
	return common.DisconnectAndWaitForClose(ctx, conn)
}
