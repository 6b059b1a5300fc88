// Package metrics gives the counters of goverbs' devices to the tools
// that operators read: Publish makes them the expvar variable "goverbs",
// served as JSON at /debug/vars with expvar's other variables,
//
//	metrics.Publish()
//	_ = http.ListenAndServe("localhost:8080", nil)
//
// and the add-on module github.com/goverbs/goverbs/metrics/promcollector
// gives them to Prometheus (it is a module of its own, so that the core
// depends on the standard library and golang.org/x/sys alone).
//
// The counters are those of Context.Counters: what each device did in this
// process since it started (devices live in the process that uses them,
// as a NIC's counters live on the NIC), the sum over every QP the device
// had, destroyed ones included, and for a RoCE device the datagrams of its
// socket (roce.DeviceCounters). They only grow. Reading them takes each
// QP's lock briefly, as a completion does; a device whose provider keeps
// no counters (rdmacore's) is left out. The devices are those of the
// providers linked into the program; this package links provider/roce, for
// its datagram counters, so the RoCE devices are among them.
package metrics

import (
	"encoding/json"
	"expvar"
	"sync"

	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/verbs"
)

// Device is the counters of one device.
type Device struct {
	Name     string
	Counters verbs.DeviceCounters
	// Wire is a RoCE device's datagram counters; nil for the others.
	Wire *roce.Counters
}

// Read returns the counters of every device that keeps them, in the order
// of verbs.Devices. A device that cannot be opened, or whose provider keeps
// no counters, is left out.
func Read() []Device {
	var out []Device
	for _, d := range verbs.Devices() {
		ctx, err := d.Open()
		if err != nil {
			continue
		}
		c, err := ctx.Counters()
		ctx.Close()
		if err != nil { // verbs.ErrNotSupported
			continue
		}
		dev := Device{Name: d.Name(), Counters: c}
		if w, ok := roce.DeviceCounters(d.Name()); ok {
			dev.Wire = &w
		}
		out = append(out, dev)
	}
	return out
}

// Opcodes returns the messages and bytes sent by opcode name (the
// WROpcode's, e.g. "RDMA_WRITE"), the opcodes that sent nothing left out.
func (d *Device) Opcodes() map[string]verbs.OpCount {
	m := map[string]verbs.OpCount{}
	for op, n := range d.Counters.Sent {
		if n.Msgs > 0 {
			m[verbs.WROpcode(op).String()] = n
		}
	}
	return m
}

// Errors returns the completions with an error status by status name (the
// C constant's, e.g. "IBV_WC_WR_FLUSH_ERR"), of the send queues (send) or
// the receive queues (recv), the statuses that never occurred left out.
func (d *Device) Errors(send bool) map[string]uint64 {
	errs := &d.Counters.RecvErrors
	if send {
		errs = &d.Counters.SendErrors
	}
	m := map[string]uint64{}
	for st, n := range errs {
		if n > 0 {
			m[verbs.WCStatus(st).Name()] = n
		}
	}
	return m
}

// The JSON that expvar serves, one object per device.
type (
	opJSON struct {
		Msgs  uint64 `json:"msgs"`
		Bytes uint64 `json:"bytes"`
	}
	wireJSON struct {
		Received  uint64 `json:"received"`
		Sent      uint64 `json:"sent"`
		Writes    uint64 `json:"writes"`
		SendFail  uint64 `json:"send_fail"`
		BadICRC   uint64 `json:"bad_icrc"`
		Malformed uint64 `json:"malformed"`
		NoQP      uint64 `json:"no_qp"`
	}
	deviceJSON struct {
		QPs         uint64            `json:"qps"`
		Sent        map[string]opJSON `json:"sent"`
		Received    opJSON            `json:"received"`
		SendErrors  map[string]uint64 `json:"send_errors"`
		RecvErrors  map[string]uint64 `json:"recv_errors"`
		Retransmits uint64            `json:"retransmits"`
		RNRNaks     uint64            `json:"rnr_naks"`
		CQOverflows uint64            `json:"cq_overflows"`
		Wire        *wireJSON         `json:"wire,omitempty"`
	}
)

// JSON returns the counters of every device as one JSON object, keyed by
// device name, as Publish's variable shows them:
//
//	{"roce0": {"qps": 2, "sent": {"SEND": {"msgs": 10, "bytes": 640}},
//	  "received": {"msgs": 10, "bytes": 640},
//	  "send_errors": {}, "recv_errors": {"IBV_WC_WR_FLUSH_ERR": 1},
//	  "retransmits": 0, "rnr_naks": 0, "cq_overflows": 0,
//	  "wire": {"received": 21, "sent": 21, "writes": 21, "send_fail": 0,
//	    "bad_icrc": 0, "malformed": 0, "no_qp": 0}}, ...}
func JSON() []byte {
	all := map[string]deviceJSON{}
	for _, d := range Read() {
		c := &d.Counters
		j := deviceJSON{QPs: c.QPs, Sent: map[string]opJSON{}, Received: opJSON(c.Received),
			SendErrors: d.Errors(true), RecvErrors: d.Errors(false),
			Retransmits: c.Retransmits, RNRNaks: c.RNRNaks, CQOverflows: c.CQOverflows}
		for op, n := range d.Opcodes() {
			j.Sent[op] = opJSON(n)
		}
		if w := d.Wire; w != nil {
			j.Wire = &wireJSON{Received: w.Received, Sent: w.Sent, Writes: w.Writes, SendFail: w.SendFail,
				BadICRC: w.BadICRC, Malformed: w.Malformed, NoQP: w.NoQP}
		}
		all[d.Name] = j
	}
	b, _ := json.Marshal(all) // maps of strings and numbers always marshal
	return b
}

// VarName is the expvar variable Publish publishes.
const VarName = "goverbs"

var publish sync.Once

// Publish publishes the counters of every device as the expvar variable
// "goverbs" (VarName), read afresh each time the variable is (JSON's
// format). Calling it again does nothing; it panics, as expvar.Publish
// does, if another package took the name.
func Publish() {
	publish.Do(func() {
		expvar.Publish(VarName, expvar.Func(func() any { return json.RawMessage(JSON()) }))
	})
}
