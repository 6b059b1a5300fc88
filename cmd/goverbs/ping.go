package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// rping's wire protocol (librdmacm/examples/rping.c): each side keeps one
// 16-byte receive posted; the client advertises a buffer with a 16-byte
// message (address, rkey, size; big-endian), the server RDMA READs it, says
// "go ahead", the client advertises its sink, the server RDMA WRITEs what it
// read there, says "go ahead", and the client compares.
const rpingInfoLen = 16

type pingOpts struct {
	server, client  bool
	addr            string
	port            int
	count, size     int
	verbose, verify bool
	debug           bool
	timeout         time.Duration
	tcp             *iwarp.Config // the iWARP provider's configuration (nil: its defaults)
	dev             string        // the device the address leads to, for messages
}

const pingHelp = `usage: goverbs ping -s [-vVd] [-S SIZE] [-C COUNT] [-a ADDR] [-p PORT]
       goverbs ping -c [-vVd] [-S SIZE] [-C COUNT] -a ADDR [-p PORT]

rping's protocol and flags: the client advertises a buffer, the server
RDMA READs it and RDMA WRITEs it back into the client's second buffer,
COUNT times (forever with 0). Over TCP (device iwarp0, provider iwarp) it
works against rdma-core's rping on a Linux siw device, in both roles; with
-a unix:/path or unix:@name, over shared memory (device shm0, provider shm)
between two processes of this host; with -a roce://ADDR, over RoCEv2 in
userspace (provider roce), against rping on a Linux rxe device or a RoCE NIC.

With -V the client compares what came back with what it sent, and the
server checks what it read against rping's pattern for that ping. With -C
the server serves COUNT pings and then waits for the client to leave.

ADDR is a host or an IP address; the port is -p's. The letters are
rping's: -s is --server and -a --addr here, where perf has them as --size
and --all (see goverbs -h). A goverbs client tells a goverbs server its
-S and -C when it connects (private data that rping ignores), so that a
server whose buffer is too small, or that serves fewer pings, refuses it
and the client says why.
`

// pingHello is the private data of a goverbs client's connect request and
// of a goverbs server's rejection: a magic, then the end's -S and -C
// (big-endian). rping ignores private data, so it works with rping both
// ways; a server that finds none (rping's client) checks nothing.
var pingHello = [8]byte{'g', 'v', 'p', 'i', 'n', 'g', 0, 1}

const pingHelloLen = 16

// pingHelloOf returns the private data that announces size and count.
func pingHelloOf(size, count int) []byte {
	b := make([]byte, pingHelloLen)
	copy(b, pingHello[:])
	binary.BigEndian.PutUint32(b[8:], uint32(size))
	binary.BigEndian.PutUint32(b[12:], uint32(count))
	return b
}

// parsePingHello returns the size and count private data announces, if it
// is a goverbs ping's.
func parsePingHello(b []byte) (size, count int, ok bool) {
	if len(b) < pingHelloLen || !bytes.Equal(b[:8], pingHello[:]) {
		return 0, 0, false
	}
	return int(binary.BigEndian.Uint32(b[8:])), int(binary.BigEndian.Uint32(b[12:])), true
}

// pingRefusal returns why a server of size srvSize serving srvCount pings
// (0: forever) cannot serve a client asking for size and count, or "".
func pingRefusal(srvSize, srvCount, size, count int) string {
	switch {
	case size > srvSize:
		return fmt.Sprintf("the client's -S %d is larger than the server's %d (give both the same -S)", size, srvSize)
	case srvCount > 0 && (count == 0 || count > srvCount):
		c := "forever"
		if count > 0 {
			c = strconv.Itoa(count) + " pings"
		}
		return fmt.Sprintf("the client asks for %s, the server serves -C %d (give both the same -C)", c, srvCount)
	}
	return ""
}

func ping(args []string) error {
	fs := newCommand("ping", pingHelp)
	var o pingOpts
	fs.BoolVarP(&o.server, "server", "s", false, "server")
	fs.BoolVarP(&o.client, "client", "c", false, "client")
	fs.StringVarP(&o.addr, "addr", "a", "", "address (client: the server's; server: the one to bind, default all); unix:/path or unix:@name: shared memory (shm0) between processes on this host")
	fs.IntVarP(&o.port, "port", "p", 7174, "port")
	fs.IntVarP(&o.count, "count", "C", 0, "ping count (0: forever)")
	fs.IntVarP(&o.size, "size", "S", 64, "ping data size")
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "display ping data")
	fs.BoolVarP(&o.verify, "validate", "V", false, "validate ping data")
	fs.BoolVarP(&o.debug, "debug", "d", false, "debug printfs")
	o.timeout = 30 * time.Second
	fs.VarP((*durationFlag)(&o.timeout), "timeout", "", "timeout for each step: seconds (2.5) or with a unit (2500ms) (goverbs addition)")
	crc := fs.Bool("crc", false, "ask for MPA CRC32C over TCP (goverbs addition; CRC is on when either side asks)")
	fs.movedLetter("t", "ping's timeout is --timeout")
	args, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.noArgs(args); err != nil {
		return err
	}
	if *crc {
		o.tcp = &iwarp.Config{CRC: true}
	}
	if o.server == o.client {
		return badUsage("ping", "give exactly one of -s and -c")
	}
	if o.size < 23 || o.size > 65535 { // rping's range
		return badUsage("ping", "invalid size %d (valid range is 23 to 65535)", o.size)
	}
	if o.count < 0 {
		return badUsage("ping", "invalid count %d", o.count)
	}
	if o.timeout <= 0 {
		return badUsage("ping", "-t %v: a positive timeout", o.timeout)
	}
	if o.client && o.addr == "" {
		return badUsage("ping", "-c needs -a ADDR")
	}
	if o.port < 0 || o.port > 65535 {
		return badUsage("ping", "invalid port %d", o.port)
	}
	if err := checkPingAddr(o.addr, o.port); err != nil {
		return err
	}
	addr := net.JoinHostPort(o.addr, strconv.Itoa(o.port))
	o.dev = "iwarp0"
	if strings.HasPrefix(o.addr, "unix:") {
		addr = o.addr // shared memory (shm0): the socket name
		o.dev = "shm0"
		if fs.Changed("port") {
			return badUsage("ping", "-p with -a %s: a unix: address is the whole address, it has no port", o.addr)
		}
		if *crc {
			return badUsage("ping", "--crc with -a %s: MPA CRC is iWARP's (TCP); shared memory has no MPA", o.addr)
		}
	}
	if host, ok := strings.CutPrefix(o.addr, "roce://"); ok {
		// RoCEv2: IB CM over UDP to an rxe device or a RoCE NIC. The
		// port is the rdma_cm port space's, as rping's -p is.
		if host == "" {
			return badUsage("ping", "-a roce://ADDR needs an IP address (the server's, or the local one to bind)")
		}
		if *crc {
			return badUsage("ping", "--crc with -a %s: MPA CRC is iWARP's (TCP); RoCEv2 has its ICRC always", o.addr)
		}
		addr = "roce://" + net.JoinHostPort(host, strconv.Itoa(o.port))
		o.dev = "roce"
	}
	if err := fs.begin(); err != nil {
		return err
	}
	if o.server {
		return pingServer(addr, &o)
	}
	return pingClient(addr, &o)
}

// checkPingAddr refuses an -a that carries a port: rping's -a is the
// host, its -p the port.
func checkPingAddr(addr string, port int) error {
	if strings.HasPrefix(addr, "unix:") {
		return nil
	}
	host := strings.TrimPrefix(addr, "roce://")
	h, p, err := net.SplitHostPort(host)
	if err != nil {
		return nil // no port in it
	}
	scheme := strings.TrimSuffix(addr, host)
	return badUsage("ping", "-a %s: the port goes in -p, as with rping (-a %s%s -p %s)", addr, scheme, h, p)
}

func (o *pingOpts) dbg(format string, a ...any) {
	if o.debug {
		fmt.Fprintf(os.Stderr, format+"\n", a...)
	}
}

// pingEnd holds one side's buffers.
type pingEnd struct {
	id                *rdmacm.ID
	recvBuf, sendBuf  []byte
	recvMR, sendMR    *verbs.MR
	rdmaBuf, startBuf []byte
	rdmaMR, startMR   *verbs.MR
	o                 *pingOpts
}

func (e *pingEnd) setup(id *rdmacm.ID, client bool) error {
	e.id = id
	if err := id.CreateQP(nil, verbs.QPInitAttr{QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	var err error
	e.recvBuf, e.sendBuf = make([]byte, rpingInfoLen), make([]byte, rpingInfoLen)
	if e.recvMR, err = id.RegMsgs(e.recvBuf); err != nil {
		return err
	}
	if e.sendMR, err = id.RegMsgs(e.sendBuf); err != nil {
		return err
	}
	rw := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	e.rdmaBuf = make([]byte, e.o.size)
	if e.rdmaMR, err = id.PD().RegMR(e.rdmaBuf, rw); err != nil {
		return err
	}
	if client {
		e.startBuf = make([]byte, e.o.size)
		if e.startMR, err = id.PD().RegMR(e.startBuf, rw); err != nil {
			return err
		}
	}
	return e.postRecv()
}

func (e *pingEnd) close() {
	e.id.Close()
	for _, mr := range []*verbs.MR{e.recvMR, e.sendMR, e.rdmaMR, e.startMR} {
		if mr != nil {
			mr.Dereg()
		}
	}
}

func (e *pingEnd) postRecv() error { return e.id.PostRecv(1, e.recvBuf, e.recvMR) }

func (e *pingEnd) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), e.o.timeout)
}

// recv waits for the next 16-byte message and reposts the receive.
func (e *pingEnd) recv() error {
	ctx, cancel := e.ctx()
	defer cancel()
	wc, err := e.id.GetRecvComp(ctx)
	if err != nil {
		return err
	}
	if wc.Status != verbs.WCSuccess {
		return &verbs.WCError{WRID: wc.WRID, Status: wc.Status, Opcode: wc.Opcode}
	}
	if wc.ByteLen != rpingInfoLen {
		return fmt.Errorf("ping: received %d bytes, want %d", wc.ByteLen, rpingInfoLen)
	}
	return e.postRecv()
}

// sendWait posts a signaled send work request and waits for its completion.
func (e *pingEnd) sendWait(wr verbs.SendWR) error {
	wr.Flags |= verbs.SendSignaled
	if err := e.id.QP().PostSend([]verbs.SendWR{wr}); err != nil {
		return err
	}
	ctx, cancel := e.ctx()
	defer cancel()
	wc, err := e.id.GetSendComp(ctx)
	if err != nil {
		return err
	}
	return wc.Err()
}

func (e *pingEnd) sendInfo(buf []byte, mr *verbs.MR) error {
	binary.BigEndian.PutUint64(e.sendBuf[0:], mr.Addr())
	binary.BigEndian.PutUint32(e.sendBuf[8:], mr.RKey())
	binary.BigEndian.PutUint32(e.sendBuf[12:], uint32(len(buf)))
	return e.sendWait(verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{e.sendMR.SGE(0, rpingInfoLen)}})
}

func pingClient(addr string, o *pingOpts) error {
	id, err := rdmacm.NewID(addr, o.idOptions())
	if err != nil {
		return err
	}
	e := &pingEnd{o: o}
	defer e.close()
	if err := e.setup(id, true); err != nil {
		return err
	}
	ctx, cancel := e.ctx()
	err = id.Connect(ctx, &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7,
		PrivateData: pingHelloOf(o.size, o.count)})
	cancel()
	var rej *rdmacm.RejectedError
	if errors.As(err, &rej) {
		if size, count, ok := parsePingHello(rej.PrivateData); ok {
			return fmt.Errorf("the server at %s refused: %s", addr, pingRefusal(size, count, o.size, o.count))
		}
	}
	if err != nil {
		return fmt.Errorf("connect to %s: %w", addr, err)
	}
	o.dbg("client connected to %v over %s", id.RemoteAddr(), id.DeviceContext().Device().Name())
	for ping := 0; o.count == 0 || ping < o.count; ping++ {
		pingData(e.startBuf, ping)
		if err := e.sendInfo(e.startBuf, e.startMR); err != nil {
			return fmt.Errorf("ping %d: advertising the source: %w", ping, err)
		}
		if err := e.recv(); err != nil {
			return fmt.Errorf("ping %d: waiting for the server's read: %w", ping, serverGone(err))
		}
		if err := e.sendInfo(e.rdmaBuf, e.rdmaMR); err != nil {
			return fmt.Errorf("ping %d: advertising the sink: %w", ping, err)
		}
		if err := e.recv(); err != nil {
			return fmt.Errorf("ping %d: waiting for the server's write: %w", ping, serverGone(err))
		}
		if o.verify && !bytes.Equal(e.startBuf, e.rdmaBuf) {
			return fmt.Errorf("data mismatch at ping %d", ping)
		}
		if o.verbose {
			fmt.Printf("ping data: %s\n", cstring(e.rdmaBuf))
		}
	}
	o.dbg("client disconnecting")
	return id.Disconnect()
}

// pingData fills b with rping's data for ping number n: "rdma-ping-N: ",
// then letters from 'A' to 'z' in a cycle that starts one further each
// ping, then a NUL.
func pingData(b []byte, n int) {
	if len(b) == 0 {
		return
	}
	cc := copy(b, fmt.Sprintf("rdma-ping-%d: ", n))
	c := byte(65 + n%58)
	for i := cc; i < len(b); i++ {
		b[i] = c
		if c++; c > 122 {
			c = 65
		}
	}
	b[len(b)-1] = 0
}

func cstring(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

func pingServer(addr string, o *pingOpts) error {
	ln, err := rdmacm.NewID(addr, o.idOptions())
	if err != nil {
		return err
	}
	if err := ln.Listen(); err != nil {
		ln.Close()
		return err
	}
	defer ln.Close()
	o.dbg("server listening on %v (%s)", ln.LocalAddr(), ln.DeviceContext().Device().Name())
	req, err := ln.GetRequest(context.Background())
	if err != nil {
		return err
	}
	if size, count, ok := parsePingHello(req.PrivateData()); ok {
		if why := pingRefusal(o.size, o.count, size, count); why != "" {
			req.Reject(pingHelloOf(o.size, o.count))
			req.Close()
			return fmt.Errorf("refused the client at %v: %s", req.RemoteAddr(), why)
		}
	}
	e := &pingEnd{o: o}
	defer e.close()
	if err := e.setup(req, false); err != nil {
		req.Reject(nil)
		return err
	}
	ctx, cancel := e.ctx()
	err = req.Accept(ctx, &rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1})
	cancel()
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	o.dbg("server accepted %v", req.RemoteAddr())
	var want []byte
	if o.verify {
		want = make([]byte, o.size)
	}
	for n := 0; ; n++ {
		if err := e.recv(); err != nil {
			if isEndOfPing(err) {
				o.dbg("server: client disconnected after %d pings", n)
				return nil
			}
			return err
		}
		if o.count > 0 && n == o.count {
			return fmt.Errorf("the client goes on after the %d pings of -C", o.count)
		}
		raddr, rkey, rlen := binary.BigEndian.Uint64(e.recvBuf), binary.BigEndian.Uint32(e.recvBuf[8:]), binary.BigEndian.Uint32(e.recvBuf[12:])
		if int(rlen) > len(e.rdmaBuf) {
			return fmt.Errorf("client advertised %d bytes, the server's buffer has %d (use the same -S)", rlen, len(e.rdmaBuf))
		}
		if err := e.sendWait(verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{e.rdmaMR.SGE(0, int(rlen))}, RemoteAddr: raddr, RKey: rkey}); err != nil {
			return fmt.Errorf("rdma read: %w", err)
		}
		if want != nil {
			if pingData(want[:rlen], n); !bytes.Equal(e.rdmaBuf[:rlen], want[:rlen]) {
				return fmt.Errorf("data mismatch at ping %d: read %q, rping's pattern is %q", n, cstring(e.rdmaBuf[:rlen]), cstring(want[:rlen]))
			}
		}
		if o.verbose {
			fmt.Printf("server ping data: %s\n", cstring(e.rdmaBuf))
		}
		if err := e.sendWait(verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{e.sendMR.SGE(0, rpingInfoLen)}}); err != nil {
			return err
		}
		if err := e.recv(); err != nil {
			return err
		}
		raddr, rkey = binary.BigEndian.Uint64(e.recvBuf), binary.BigEndian.Uint32(e.recvBuf[8:])
		wlen := min(len(cstring(e.rdmaBuf))+1, len(e.rdmaBuf))
		if err := e.sendWait(verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{e.rdmaMR.SGE(0, wlen)}, RemoteAddr: raddr, RKey: rkey}); err != nil {
			return fmt.Errorf("rdma write: %w", err)
		}
		if err := e.sendWait(verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{e.sendMR.SGE(0, rpingInfoLen)}}); err != nil {
			// The last ping's SEND arrived but its ACK did not (a lossy
			// link) when the client, done, disconnected: the SEND is
			// flushed. rping takes a flushed completion as the end.
			if isEndOfPing(err) && (o.count == 0 || n+1 == o.count) {
				o.dbg("server: the client disconnected after %d pings, the last SEND unacknowledged", n+1)
				return nil
			}
			return err
		}
	}
}

// serverGone says what a flushed receive on the client means: the server
// ended the connection (its output says why).
func serverGone(err error) error {
	if isEndOfPing(err) {
		return fmt.Errorf("the server closed the connection (its output says why): %w", err)
	}
	return err
}

// isEndOfPing reports the flushed receive that a client's disconnect causes.
func isEndOfPing(err error) bool {
	var we *verbs.WCError
	return errors.As(err, &we) && we.Status == verbs.WCWRFlushErr
}

// idOptions are the options of the identifiers ping makes.
func (o *pingOpts) idOptions() rdmacm.IDOptions { return rdmacm.IDOptions{TCP: o.tcp} }
