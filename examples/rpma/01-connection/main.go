// Command 01-connection is the Go counterpart of librpma's example
// 01-connection: the client and the server connect, exchange greetings in
// the connection's private data, and disconnect.
//
//	01-connection server [-a ADDR] [-p PORT]
//	01-connection client [-a ADDR] [-p PORT]
package main

import (
	"context"
	"os"

	"github.com/goverbs/goverbs/examples/rpma/internal/common"
	"github.com/goverbs/goverbs/rpma"
)

func main() { os.Exit(common.Main("01-connection", "", server, client, os.Args[1:], os.Stdout)) }

func printPrivateData(o *common.Opts, conn *rpma.Conn) {
	if pd := conn.PrivateData(); len(pd) > 0 {
		o.Printf("Received a message: %s\n", common.CString(pd))
	} else {
		o.Printf("No message received\n")
	}
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
	conn, err := common.ServerAccept(ctx, ep, o.ConnCfg(nil), []byte("Hello client!\x00"))
	if err != nil {
		return err
	}
	printPrivateData(o, conn)
	return common.DisconnectAndWaitForClose(ctx, conn)
}

func client(ctx context.Context, o *common.Opts, _ []string) error {
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	conn, err := common.ClientConnect(ctx, peer, o, nil, []byte("Hello server!\x00"))
	if err != nil {
		return err
	}
	printPrivateData(o, conn)
	return common.WaitForCloseAndDisconnect(ctx, conn)
}
