package roce

import (
	"context"
	"net"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/verbs"
)

// transport is the provider's connection manager as package rdmacm sees
// it, under the scheme "roce" (roce://host:port).
type transport struct{}

func (transport) Name() string        { return "roce" }
func (transport) MaxPrivateData() int { return MaxPrivateData }

// DeviceName is the first device's (the device of an address is DeviceFor's).
func (transport) DeviceName() string {
	devs.Lock()
	defer devs.Unlock()
	if len(devs.list) == 0 {
		return ""
	}
	return devs.list[0].eng.Name()
}

// DeviceFor implements cm.Router: a listener's device is its address's;
// a dialer's, the one of the local address the peer is reached from.
func (transport) DeviceFor(addr string, listen bool) (string, error) {
	ap, err := resolve(addr)
	if err != nil {
		if host, _, serr := net.SplitHostPort(addr); listen && serr == nil && host == "" {
			return transport{}.DeviceName(), nil
		}
		return "", err
	}
	a := ap.Addr()
	if !listen {
		if a, err = sourceFor(a); err != nil {
			return "", err
		}
	}
	if a.IsUnspecified() {
		return transport{}.DeviceName(), nil
	}
	return addDevice(a).eng.Name(), nil
}

func (transport) Listen(addr string, cfg any) (cm.Listener, error) {
	c, _ := cfg.(*Config)
	l, err := Listen(addr, c)
	if err != nil {
		return nil, err
	}
	return listener{l}, nil
}

func (transport) Dial(ctx context.Context, addr string, qp *verbs.QP, p cm.Params) (cm.Conn, error) {
	cfg, _ := p.Config.(*Config)
	c, err := Dial(ctx, addr, qp, Params{PrivateData: p.PrivateData, IRD: cm.Explicit(p.IRD), ORD: cm.Explicit(p.ORD),
		RNRRetry: cm.Explicit(int(p.RNRRetry)), RetryCount: cm.Explicit(int(p.RetryCount))}, cfg)
	if err != nil {
		return nil, err
	}
	return c, nil
}

type listener struct{ *Listener }

func (l listener) Next(ctx context.Context) (cm.Request, error) {
	r, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return request{r}, nil
}

type request struct{ *Request }

func (r request) Accept(qp *verbs.QP, p cm.Params) (cm.Conn, error) {
	c, err := r.Request.Accept(qp, Params{PrivateData: p.PrivateData, IRD: cm.Explicit(p.IRD), ORD: cm.Explicit(p.ORD), RNRRetry: cm.Explicit(int(p.RNRRetry))})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// ListenUD implements cm.UDResolver.
func (transport) ListenUD(addr string, cfg any) (cm.Listener, error) {
	l, err := ListenUD(addr)
	if err != nil {
		return nil, err
	}
	return udListenerCM{l}, nil
}

// ResolveUD implements cm.UDResolver.
func (transport) ResolveUD(ctx context.Context, addr string, qp *verbs.QP, p cm.Params) (cm.UDPeer, error) {
	return resolveUD(ctx, addr, qp, p.PrivateData)
}

type udListenerCM struct{ *UDListener }

func (l udListenerCM) Next(ctx context.Context) (cm.Request, error) {
	r, err := l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return udRequestCM{r}, nil
}

// udRequestCM is a SIDR request as rdmacm sees a connection request: it
// has no resources to negotiate, and its "connection" never ends.
type udRequestCM struct{ *UDRequest }

func (udRequestCM) IRD() int { return 0 }
func (udRequestCM) ORD() int { return 0 }

func (r udRequestCM) Accept(qp *verbs.QP, p cm.Params) (cm.Conn, error) {
	if err := r.UDRequest.Accept(qp, p.PrivateData); err != nil {
		return nil, err
	}
	return udConn{r.UDRequest}, nil
}

// udConn is the passive side of a UD resolution: nothing to end.
type udConn struct{ r *UDRequest }

func (c udConn) PrivateData() []byte  { return c.r.PrivateData() }
func (udConn) IRD() int               { return 0 }
func (udConn) ORD() int               { return 0 }
func (c udConn) LocalAddr() net.Addr  { return c.r.LocalAddr() }
func (c udConn) RemoteAddr() net.Addr { return c.r.RemoteAddr() }
func (udConn) Done() <-chan struct{}  { return nil }
func (udConn) Err() error             { return nil }
func (udConn) Disconnect() error      { return nil }
