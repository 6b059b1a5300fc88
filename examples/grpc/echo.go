// Command grpc runs gRPC over goverbs' rsocket: an echo service (unary and
// bidirectional streaming) whose server is grpc.Server.Serve on an
// rsocket.Listener and whose client dials with grpc.WithContextDialer, both
// unchanged grpc-go. It is a module of its own so that the core packages
// keep no gRPC dependency.
//
//	go run . [-addr unix:@grpc-echo | -addr 127.0.0.1:7471] [-n 1000] [-size 64]
//
// The service needs no generated code: its messages are raw bytes (a
// codec of its own), its service description is written by hand.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"

	"github.com/goverbs/goverbs/rsocket"
)

// rawCodec carries []byte messages as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: %T is not *[]byte", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: %T is not *[]byte", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "raw" }

func init() { encoding.RegisterCodec(rawCodec{}) }

// echoServer answers each message with itself.
type echoServer struct{}

func unaryHandler(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var in []byte
	if err := dec(&in); err != nil {
		return nil, err
	}
	return &in, nil
}

func streamHandler(srv any, stream grpc.ServerStream) error {
	var m []byte
	for {
		if err := stream.RecvMsg(&m); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if err := stream.SendMsg(&m); err != nil {
			return err
		}
	}
}

// serviceDesc is what protoc would generate for
//
//	service Echo { rpc Unary(bytes) returns (bytes); rpc Stream(stream bytes) returns (stream bytes); }
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "goverbs.rsocket.Echo",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Unary", Handler: unaryHandler}},
	Streams: []grpc.StreamDesc{{
		StreamName: "Stream", Handler: streamHandler, ServerStreams: true, ClientStreams: true,
	}},
}

// newServer returns a gRPC server with the echo service.
func newServer() *grpc.Server {
	s := grpc.NewServer()
	s.RegisterService(&serviceDesc, echoServer{})
	return s
}

// dialOptions connect through dial (rsocket.Dial, or net.Dialer's).
func dialOptions(dial func(context.Context, string) (net.Conn, error)) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithContextDialer(dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype("raw")),
	}
}

// unary calls Unary once.
func unary(ctx context.Context, cc *grpc.ClientConn, in []byte, out *[]byte) error {
	return cc.Invoke(ctx, "/goverbs.rsocket.Echo/Unary", &in, out)
}

// openStream opens the Stream method.
func openStream(ctx context.Context, cc *grpc.ClientConn) (grpc.ClientStream, error) {
	return cc.NewStream(ctx, &serviceDesc.Streams[0], "/goverbs.rsocket.Echo/Stream")
}

func main() {
	addr := flag.String("addr", "unix:@goverbs-grpc-echo", "rsocket address (rdmacm's forms)")
	n := flag.Int("n", 1000, "unary calls")
	size := flag.Int("size", 64, "message size")
	flag.Parse()

	ln, err := rsocket.Listen(*addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := newServer()
	go srv.Serve(ln) // grpc-go takes the rsocket listener as any net.Listener
	defer srv.Stop()

	target := *addr
	if a := ln.Addr(); a.Network() == "tcp" {
		target = a.String()
	}
	// passthrough: the target is handed to the dialer as it is.
	cc, err := grpc.NewClient("passthrough:///"+target, dialOptions(rsocket.Dial)...)
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	ctx := context.Background()
	msg, out := make([]byte, *size), []byte(nil)
	start := time.Now()
	for range *n {
		if err := unary(ctx, cc, msg, &out); err != nil {
			log.Fatal(err)
		}
	}
	el := time.Since(start)
	fmt.Printf("%d unary calls of %d bytes over rsocket %s: %v per call\n", *n, *size, *addr, el/time.Duration(*n))
}
