// Package common holds what goverbs' counterparts of librpma's examples
// share, as librpma's examples/common does: the private-data layout the
// examples exchange descriptors in (struct common_data), connection set-up
// and tear-down, completion waits, the "hello" structure and its file
// mapping with a signature, and the GPSPM flush messages.
package common

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/goverbs/goverbs/rpma"
	"github.com/goverbs/goverbs/verbs"
)

// DescriptorsMaxSize is the room for descriptors in Data (DESCRIPTORS_MAX_SIZE).
const DescriptorsMaxSize = 24

// DataSize is the size of struct common_data: data_offset (2 bytes, host
// order, little-endian here), mr_desc_size (1), pcfg_desc_size (1),
// descriptors (24).
const DataSize = 4 + DescriptorsMaxSize

// Data is struct common_data of librpma's examples: what a side tells the
// other in the connection's private data.
type Data struct {
	DataOffset uint16 // where the user data starts in the region
	MRDesc     []byte // a region descriptor
	PcfgDesc   []byte // a peer configuration descriptor, or nil
}

// Encode lays d out as struct common_data.
func (d Data) Encode() []byte {
	b := make([]byte, DataSize)
	binary.LittleEndian.PutUint16(b, d.DataOffset)
	b[2], b[3] = byte(len(d.MRDesc)), byte(len(d.PcfgDesc))
	n := copy(b[4:], d.MRDesc)
	copy(b[4+n:], d.PcfgDesc)
	return b
}

// DecodeData reads struct common_data from private data.
func DecodeData(pd []byte) (Data, error) {
	if len(pd) < DataSize {
		return Data{}, fmt.Errorf("private data of %d bytes, want at least %d", len(pd), DataSize)
	}
	mn, pn := int(pd[2]), int(pd[3])
	if mn+pn > DescriptorsMaxSize {
		return Data{}, fmt.Errorf("descriptor sizes %d+%d exceed %d", mn, pn, DescriptorsMaxSize)
	}
	return Data{DataOffset: binary.LittleEndian.Uint16(pd), MRDesc: pd[4 : 4+mn], PcfgDesc: pd[4+mn : 4+mn+pn]}, nil
}

// Opts are the command-line options every example takes.
type Opts struct {
	Addr, Port string
	PmemPath   string // a file to map as persistent memory; "" uses DRAM
	NoExt      bool   // do not offer goverbs' extensions (towards librpma on siw)
	Out        io.Writer
	// Ready is called with the port once a server listens (tests use port "0").
	Ready func(port string)
}

// Flags registers the common flags on fs and returns the options they fill.
func Flags(fs *flag.FlagSet, o *Opts) {
	fs.StringVar(&o.Addr, "a", "127.0.0.1", "address")
	fs.StringVar(&o.Port, "p", "7204", "port")
	fs.BoolVar(&o.NoExt, "no-ext", false, "do not offer goverbs extensions (use towards a librpma server on siw)")
}

// Printf writes to o.Out.
func (o *Opts) Printf(format string, args ...any) {
	if o.Out != nil {
		fmt.Fprintf(o.Out, format, args...)
	}
}

// ConnCfg returns cfg (or the defaults) with the extensions option applied.
func (o *Opts) ConnCfg(cfg *rpma.ConnCfg) *rpma.ConnCfg {
	if cfg == nil {
		cfg = rpma.NewConnCfg()
	}
	cfg.SetExtensions(!o.NoExt)
	return cfg
}

// NewPeer makes a peer for addr (common_peer_via_address).
func NewPeer(addr string) (*rpma.Peer, error) {
	ctx, err := rpma.DeviceContext(addr)
	if err != nil {
		return nil, err
	}
	return rpma.NewPeer(ctx)
}

// Listen starts the endpoint and reports its port through o.Ready.
func (o *Opts) Listen(peer *rpma.Peer) (*rpma.Ep, error) {
	ep, err := peer.Listen(o.Addr, o.Port)
	if err != nil {
		return nil, err
	}
	if o.Ready != nil {
		o.Ready(ep.Port())
	}
	return ep, nil
}

// ClientConnect connects and waits for ESTABLISHED (client_connect).
func ClientConnect(ctx context.Context, peer *rpma.Peer, o *Opts, cfg *rpma.ConnCfg, pdata []byte) (*rpma.Conn, error) {
	req, err := rpma.NewConnReq(peer, o.Addr, o.Port, o.ConnCfg(cfg))
	if err != nil {
		return nil, err
	}
	return ConnectReq(ctx, req, pdata)
}

// ConnectReq connects a request and waits for ESTABLISHED.
func ConnectReq(ctx context.Context, req *rpma.ConnReq, pdata []byte) (*rpma.Conn, error) {
	conn, err := req.Connect(ctx, pdata)
	if err != nil {
		return nil, err
	}
	ev, err := conn.NextEvent(ctx)
	if err == nil && ev != rpma.ConnEstablished {
		err = fmt.Errorf("rpma_conn_next_event returned an unexpected event: %v", ev)
	}
	if err != nil {
		conn.Delete()
		return nil, err
	}
	return conn, nil
}

// ServerAccept takes the next request and accepts it (server_accept_connection).
func ServerAccept(ctx context.Context, ep *rpma.Ep, cfg *rpma.ConnCfg, pdata []byte) (*rpma.Conn, error) {
	req, err := ep.NextConnReq(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return ConnectReq(ctx, req, pdata)
}

// WaitForCloseAndDisconnect waits for the peer to close, then disconnects
// and deletes the connection (common_wait_for_conn_close_and_disconnect).
func WaitForCloseAndDisconnect(ctx context.Context, conn *rpma.Conn) error {
	ev, err := conn.NextEvent(ctx)
	if err == nil && ev != rpma.ConnClosed {
		err = fmt.Errorf("rpma_conn_next_event returned an unexpected event: %v", ev)
	}
	conn.Disconnect()
	if derr := conn.Delete(); err == nil {
		err = derr
	}
	return err
}

// DisconnectAndWaitForClose disconnects, waits for CLOSED and deletes the
// connection (common_disconnect_and_wait_for_conn_close).
func DisconnectAndWaitForClose(ctx context.Context, conn *rpma.Conn) error {
	err := conn.Disconnect()
	if err == nil {
		var ev rpma.ConnEvent
		ev, err = conn.NextEvent(ctx)
		if err == nil && ev != rpma.ConnClosed {
			err = fmt.Errorf("rpma_conn_next_event returned an unexpected event: %v", ev)
		}
	}
	if derr := conn.Delete(); err == nil {
		err = derr
	}
	return err
}

// WaitWC waits on cq (rpma_cq_wait) until it yields one completion
// (rpma_cq_get_wc), and checks its status and, when op is not negative,
// its opcode.
func WaitWC(ctx context.Context, cq *rpma.CQ, op int) (verbs.WC, error) {
	var wc [1]verbs.WC
	for {
		_, err := cq.GetWC(wc[:])
		if err == nil {
			break
		}
		if !errors.Is(err, rpma.ErrNoCompletion) {
			return wc[0], err
		}
		if err := cq.Wait(ctx); err != nil {
			return wc[0], err
		}
	}
	if wc[0].Status != verbs.WCSuccess {
		return wc[0], fmt.Errorf("operation %#x failed: %v", wc[0].WRID, wc[0].Status)
	}
	if op >= 0 && wc[0].Opcode != verbs.WCOpcode(op) {
		return wc[0], fmt.Errorf("unexpected wc.opcode %v (want %v)", wc[0].Opcode, verbs.WCOpcode(op))
	}
	return wc[0], nil
}

// CString returns b up to its first NUL.
func CString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// PutCString writes s and a NUL into b (truncating s to fit).
func PutCString(b []byte, s string) {
	n := copy(b[:len(b)-1], s)
	b[n] = 0
}

// Join joins lines for messages.
func Join(s ...string) string { return strings.Join(s, "\n") }

// Main runs an example's server or client as its command line asks:
//
//	NAME server [-a ADDR] [-p PORT] [-no-ext] [ARGS...]
//	NAME client [-a ADDR] [-p PORT] [-no-ext] [ARGS...]
//
// ARGS are those of the C example after its address and port.
func Main(name, usage string, server, client func(ctx context.Context, o *Opts, args []string) error, args []string, out io.Writer) int {
	if len(args) < 1 || (args[0] != "server" && args[0] != "client") {
		fmt.Fprintf(out, "usage: %s server|client [-a addr] [-p port] [-no-ext] %s\n", name, usage)
		return 2
	}
	fs := flag.NewFlagSet(name+" "+args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	o := &Opts{Out: out}
	Flags(fs, o)
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	run := server
	if args[0] == "client" {
		run = client
	}
	if err := run(context.Background(), o, fs.Args()); err != nil {
		fmt.Fprintf(out, "%s %s: %v\n", name, args[0], err)
		return 1
	}
	return 0
}

// IMDone is the message that ends a ping-pong (I_M_DONE).
const IMDone = ^uint64(0)

// WaitSendRecv waits on cq until it has seen the completion of a send
// (unless sendDone) and of a receive into recvID, as librpma's
// wait_and_process_completions does.
func WaitSendRecv(ctx context.Context, cq *rpma.CQ, recvID uint64, sendDone bool) error {
	recvDone := false
	var wc [2]verbs.WC
	for !sendDone || !recvDone {
		if err := cq.Wait(ctx); err != nil {
			return err
		}
		for {
			n, err := cq.GetWC(wc[:])
			if errors.Is(err, rpma.ErrNoCompletion) {
				break
			}
			if err != nil {
				return err
			}
			for _, w := range wc[:n] {
				if w.Status != verbs.WCSuccess {
					return fmt.Errorf("%v failed: %v", w.Opcode, w.Status)
				}
				switch w.Opcode {
				case verbs.WCSend:
					sendDone = true
				case verbs.WCRecv:
					if w.WRID != recvID || w.ByteLen != 8 {
						return fmt.Errorf("unexpected receive completion (wr_id %#x, %d bytes)", w.WRID, w.ByteLen)
					}
					recvDone = true
				}
			}
		}
	}
	return nil
}
