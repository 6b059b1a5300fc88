// Command 07-atomic-write is the Go counterpart of librpma's example
// 07-atomic-write: the server keeps a log (a file mapping when given one)
// whose header holds how much of it is used; the client appends words to
// it, each with a write and a flush followed by an atomic write of the new
// "used" value and its flush, so the log is consistent at every step. The
// server prints the log when the client is done.
//
//	07-atomic-write server [-a ADDR] [-p PORT] [<pmem-path>]
//	07-atomic-write client [-a ADDR] [-p PORT] <word1> [<word2>] [...]
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strings"

	"github.com/goverbs/goverbs/examples/rpma/internal/common"
	"github.com/goverbs/goverbs/rpma"
	"github.com/goverbs/goverbs/verbs"
)

func main() {
	os.Exit(common.Main("07-atomic-write", "[<pmem-path>] (server) | <word1> [<word2>] [...] (client)", server, client, os.Args[1:], os.Stdout))
}

// struct log: signature[8], used (8 bytes, aligned for the atomic write), data[1024].
const (
	logSignature = "LOG\x00\x00\x00\x00\x00"
	usedOffset   = 8
	dataOffset   = 16
	logSize      = dataOffset + 1024
	flushID      = 0xF01D
)

func server(ctx context.Context, o *common.Opts, args []string) error {
	var buf []byte
	isPmem := false
	if len(args) > 0 {
		m, err := rpma.MapFile(args[0], logSize)
		if err != nil {
			return err
		}
		defer m.Close()
		buf, isPmem = m.Bytes(), true
		if string(buf[:8]) != logSignature {
			binary.LittleEndian.PutUint64(buf[usedOffset:], dataOffset)
			copy(buf, logSignature)
			if err := m.Sync(0, dataOffset); err != nil {
				return err
			}
		}
	} else {
		buf = make([]byte, logSize)
		binary.LittleEndian.PutUint64(buf[usedOffset:], dataOffset)
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
	usage := rpma.UsageWriteDst | rpma.UsageReadSrc | rpma.UsageFlushTypeVisibility
	if isPmem {
		usage = rpma.UsageWriteDst | rpma.UsageReadSrc | rpma.UsageFlushTypePersistent
	}
	mr, err := peer.RegMR(buf, usage)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	conn, err := common.ServerAccept(ctx, ep, o.ConnCfg(nil), common.Data{DataOffset: usedOffset, MRDesc: mr.Descriptor()}.Encode())
	if err != nil {
		return err
	}
	if err := common.WaitForCloseAndDisconnect(ctx, conn); err != nil {
		return err
	}
	used := min(binary.LittleEndian.Uint64(buf[usedOffset:]), logSize)
	o.Printf("%s", strings.ReplaceAll(string(buf[dataOffset:used]), "\x00", "\n"))
	return nil
}

func client(ctx context.Context, o *common.Opts, args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("usage: client <word1> [<word2>] [...]")
	}
	peer, err := common.NewPeer(o.Addr)
	if err != nil {
		return err
	}
	defer peer.Delete()
	// The client writes to the remote log as if to persistent memory with
	// direct write (as librpma's example does).
	pcfg := rpma.NewPeerCfg()
	pcfg.SetDirectWriteToPmem(true)
	local, err := peer.RegMR(make([]byte, 1024), rpma.UsageWriteSrc|rpma.UsageReadDst)
	if err != nil {
		return err
	}
	defer local.Dereg()
	conn, err := common.ClientConnect(ctx, peer, o, nil, nil)
	if err != nil {
		return err
	}
	defer conn.Delete()
	if err := conn.ApplyRemotePeerCfg(pcfg); err != nil {
		return err
	}
	data, err := common.DecodeData(conn.PrivateData())
	if err != nil {
		return err
	}
	remote, err := rpma.RemoteMRFromDescriptor(data.MRDesc)
	if err != nil {
		return err
	}
	usedOff := int(data.DataOffset)
	if err := conn.Read(local, 0, remote, usedOff, 8, rpma.CompletionAlways, 0); err != nil {
		return err
	}
	if _, err := common.WaitWC(ctx, conn.CQ(), int(verbs.WCRDMARead)); err != nil {
		return err
	}
	used := binary.LittleEndian.Uint64(local.Bytes())
	o.Printf("used value: %d\n", used)
	typ := rpma.FlushVisibility
	if remote.SupportsFlush(rpma.FlushPersistent) {
		typ = rpma.FlushPersistent
	}
	for _, word := range args {
		common.PutCString(local.Bytes(), word)
		size := len(common.CString(local.Bytes())) + 1
		if used+uint64(size) > remote.Size() {
			return fmt.Errorf("the log is full")
		}
		if err := conn.Write(remote, int(used), local, 0, size, rpma.CompletionOnError, 0); err != nil {
			return err
		}
		if err := conn.Flush(remote, int(used), size, typ, rpma.CompletionOnError, 0); err != nil {
			return err
		}
		used += uint64(size)
		var v [8]byte
		binary.LittleEndian.PutUint64(v[:], used)
		if err := conn.AtomicWrite(remote, usedOff, v, rpma.CompletionOnError, 0); err != nil {
			return err
		}
		if err := conn.Flush(remote, usedOff, 8, typ, rpma.CompletionAlways, flushID); err != nil {
			return err
		}
		wc, err := common.WaitWC(ctx, conn.CQ(), -1)
		if err != nil {
			return err
		}
		if wc.WRID != flushID {
			return fmt.Errorf("unexpected wc.wr_id %#x", wc.WRID)
		}
	}
	return common.DisconnectAndWaitForClose(ctx, conn)
}
