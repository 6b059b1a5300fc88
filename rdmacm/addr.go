package rdmacm

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/goverbs/goverbs/internal/cm"
)

// transportFor parses an address and finds its transport.
func transportFor(addr string) (cm.Transport, string, error) {
	scheme, rest := "tcp", addr
	if i := strings.Index(addr, "://"); i > 0 {
		scheme, rest = addr[:i], addr[i+3:]
	} else if strings.HasPrefix(addr, "unix:") {
		scheme, rest = "unix", strings.TrimPrefix(addr, "unix:")
	} else if k, ok := cm.Lookup("rdma"); ok {
		// The kernel's CM (see the package doc): forced, or when it claims addr.
		switch os.Getenv("GOVERBS_CM") {
		case "kernel":
			scheme = "rdma"
		case "goverbs":
		default:
			if c, ok := k.(cm.Claimer); ok && c.Claims(rest) {
				scheme = "rdma"
			}
		}
	}
	t, ok := cm.Lookup(scheme)
	if !ok {
		return nil, "", fmt.Errorf("%w: no transport for %q in address %q (the schemes are host:port, tcp://host:port, roce://host:port, unix:/path and unix:@name)", errNotSupported, scheme, addr)
	}
	if rest == "" {
		return nil, "", fmt.Errorf("%w: address %q is empty", errInvalid, addr)
	}
	if scheme == "tcp" && (rest[0] == '@' || rest[0] == '/') {
		// A unix socket's own spelling, without the scheme that says so.
		return nil, "", fmt.Errorf("%w: address %q: a shared-memory address is unix:%s", errInvalid, addr, rest)
	}
	if scheme != "unix" {
		if err := checkHostPort(rest); err != nil {
			return nil, "", fmt.Errorf("%w: address %q: %v", errInvalid, addr, err)
		}
	}
	return t, rest, nil
}

// checkHostPort refuses what no dial can reach, so that it is an invalid
// argument at once rather than an unreachable peer later: a missing or
// malformed port, a port past 65535, an unbalanced bracket.
func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(ae.Err) // its own message repeats the address
		}
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// Addr is the address of an identifier over a transport whose addresses
// are dialed with their scheme (shared memory, RoCE): its String is the
// form Dial and Listen accept, "unix:@name", "unix:/path" or
// "roce://host:port". Over TCP, LocalAddr and RemoteAddr return the
// *net.TCPAddr itself, whose String Dial accepts as it is.
type Addr struct {
	// Scheme is the transport's: "unix" or "roce".
	Scheme string
	// Addr is the transport's own address: a *net.UnixAddr (an unnamed
	// socket, a dialer's end, has an empty Name), or a *net.UDPAddr whose
	// port is rdma_cm's port.
	Addr net.Addr
}

// Network returns the scheme.
func (a *Addr) Network() string { return a.Scheme }

// String returns the address as Dial takes it; "" for an unnamed socket.
func (a *Addr) String() string {
	s := a.Addr.String()
	switch {
	case s == "" || s == "@":
		return "" // an unnamed socket (a dialer's end): nothing to dial
	case a.Scheme == "unix":
		return "unix:" + s
	}
	return a.Scheme + "://" + s
}

// addrOf gives a transport's address the form Dial takes.
func (id *ID) addrOf(a net.Addr) net.Addr {
	if a == nil || id.tr.Name() == "tcp" {
		return a
	}
	return &Addr{Scheme: id.tr.Name(), Addr: a}
}

// deviceName is the device that serves addr: the transport's, or, for a
// transport whose device depends on the address (RoCE), the one of the
// local address the peer is reached from (rdma_resolve_addr's choice).
func deviceName(t cm.Transport, addr string) (string, error) {
	if r, ok := t.(cm.Router); ok {
		return r.DeviceFor(addr, false)
	}
	return t.DeviceName(), nil
}
