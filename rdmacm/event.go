package rdmacm

import (
	"fmt"
)

// EventType is a connection event (enum rdma_cm_event_type).
type EventType int

// Connection events; the values are those of librdmacm.
const (
	EventAddrResolved EventType = iota
	EventAddrError
	EventRouteResolved
	EventRouteError
	EventConnectRequest
	EventConnectResponse
	EventConnectError
	EventUnreachable
	EventRejected
	EventEstablished
	EventDisconnected
	EventDeviceRemoval
	_ // RDMA_CM_EVENT_MULTICAST_JOIN: goverbs has no multicast (rdma_join_multicast) yet
	_ // RDMA_CM_EVENT_MULTICAST_ERROR
	EventAddrChange
	EventTimewaitExit
)

var eventNames = [...]string{
	"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR", "RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE", "RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
}

// String returns the name rdma_event_str gives the event.
func (e EventType) String() string {
	if e >= 0 && int(e) < len(eventNames) {
		return eventNames[e]
	}
	return fmt.Sprintf("EventType(%d)", int(e))
}

// Event is a connection event (struct rdma_cm_event).
type Event struct {
	Type EventType
	// ID is the identifier the event is about; for EventConnectRequest it is
	// the new identifier of the request, and Listen is the listening one.
	ID     *ID
	Listen *ID
	// Err says why, for error events (rejected, unreachable, connect error).
	Err error
	// PrivateData is the peer's private data (connect request, established
	// on the active side, rejected).
	PrivateData []byte
	// ResponderResources and InitiatorDepth are the peer's values on a
	// connect request, and the negotiated local ones on established.
	ResponderResources int
	InitiatorDepth     int
	// UD is, on EventEstablished of an identifier of the UDP port space
	// (the active side), the peer's UD QP: its path, number and Q_Key.
	UD *UDParam
}

func (e Event) String() string {
	if e.Err != nil {
		return fmt.Sprintf("%v: %v", e.Type, e.Err)
	}
	return e.Type.String()
}
