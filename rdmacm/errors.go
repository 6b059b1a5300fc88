package rdmacm

import (
	"errors"

	"github.com/goverbs/goverbs/internal/cm"
)

// Errors of connection setup. Dial and Connect return a *RejectedError
// (errors.Is(err, ErrRejected)) when the peer rejects, and an error wrapping
// ErrUnreachable when it does not answer.
var (
	ErrRejected    = cm.ErrRejected
	ErrUnreachable = cm.ErrUnreachable
	// ErrClosed is what the methods of a closed identifier return.
	ErrClosed = errors.New("rdmacm: identifier closed")

	// An EventDisconnected's Err wraps ErrDisconnected when the peer ended
	// the connection and ErrLocalDisconnect when this side did (Disconnect,
	// Close); any other error means the connection was lost.
	ErrDisconnected    = cm.ErrPeerDisconnect
	ErrLocalDisconnect = cm.ErrLocalDisconnect
)

// RejectedError is the error of a connection that was refused. Its
// fields:
//
//	PrivateData []byte // what the peer sent with its rejection (rdma_reject); nil when the system refused
//	Reason      string // why, when the transport knows more than "rejected by the peer"
//	Err         error  // the cause when the system refused: syscall.ECONNREFUSED (nobody
//	                   // listens at the address), syscall.EACCES (the listener does not
//	                   // admit this process); nil when the peer rejected by its own choice
//
// errors.Is(err, ErrRejected) holds for every rejection, and errors.Is(err,
// syscall.ECONNREFUSED) (or EACCES) when Err is that errno. EventRejected
// carries the same error and private data.
type RejectedError = cm.RejectedError

// AcceptError is GetRequest's report that the listener failed to accept a
// connection (out of descriptors: errors.Is(err, syscall.EMFILE); out of
// memory or buffers; a connection aborted before it was accepted). The
// listener goes on listening, and GetRequest may be called again; out of
// descriptors, the waiting connection was refused at once (Shed), so its
// dialer fails now rather than at its timeout. Like a net.Error, it says
// Temporary.
type AcceptError = cm.AcceptError
