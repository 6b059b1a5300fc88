// Package faults injects faults into goverbs' pure-Go providers (loop, shm,
// iwarp, roce), so that a program's error paths can be tested with the
// verbs rules' own consequences: a work request that completes with
// RETRY_EXC_ERR in the middle of a pipeline and the flush of everything
// after it, a QP that goes fatal, a connection that drops or is refused, a
// slow or lossy wire. The code under test does not change: a test (or the
// GOVERBS_FAULTS environment variable) turns a Plan on for the whole
// process, and every device and QP is subject to it.
//
// A plan is deterministic: which requests a rule hits depends on the seed,
// the device's name, the QP's creation order on its device and the
// request's posting order on its QP, not on timing, so a failing seed
// reproduces the same faults on the same requests (Fired lists them in an
// order that is the same from run to run). Connection refusals and wire
// faults are counted process-wide, in the order they happen to occur.
//
// What each action does, by the verbs rules:
//
//   - Fail: the request is carried out, and its completion carries
//     Rule.Status instead of success, in its place among the QP's
//     completions; the QP then moves to ERR and every later request and
//     posted receive completes with WR_FLUSH_ERR. (A NIC reports
//     RETRY_EXC_ERR so when the ACK of a write that reached the peer is
//     lost: the peer may have the data.)
//   - Delay: the request, and everything posted after it on its QP, goes
//     out Rule.Delay later.
//   - KillQP: the QP fails before the request goes out: the asynchronous
//     event EventQPFatal, ERR, the request and everything after it flushed,
//     and the connection ends (the peer sees a disconnect).
//   - Disconnect: as KillQP without the event.
//   - FailRecv: an incoming message finds its receive failing as if its
//     buffers were too small (Rule.Status LOC_LEN_ERR) or not writable
//     (LOC_PROT_ERR): the receive completes with that status, the
//     responder's QP moves to ERR and flushes, and the sender hears what
//     its transport says of a real one (over the IB transports and shm, a
//     NAK: the SEND completes with REM_INV_REQ_ERR or REM_OP_ERR; over
//     iWARP, a Terminate and the connection's end).
//   - RefuseConnect: a listener rejects the connection request before the
//     application's GetRequest sees it; the dialer gets ErrRejected.
//   - WireDrop, WireDup, WireReorder: a RoCE datagram is lost, delivered
//     twice, or delivered after the next one, and the RC transport's
//     retransmission, duplicate detection and sequence NAKs do the rest.
//
// Only one plan is active at a time. With none, the cost is one atomic load
// per send request and per receive consumed.
package faults

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/hook"
	"github.com/goverbs/goverbs/verbs"
)

// Action is what a rule does.
type Action int

// The actions (see the package doc).
const (
	Fail Action = iota + 1
	Delay
	KillQP
	Disconnect
	RefuseConnect
	WireDrop
	WireDup
	WireReorder
	FailRecv
)

var actionNames = [...]string{Fail: "fail", Delay: "delay", KillQP: "kill", Disconnect: "disconnect",
	RefuseConnect: "refuse", WireDrop: "drop", WireDup: "dup", WireReorder: "reorder", FailRecv: "failrecv"}

func (a Action) String() string {
	if a > 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// onRequest reports whether the action applies to send requests.
func (a Action) onRequest() bool { return a >= Fail && a <= Disconnect }

// onQP reports whether the action applies to a QP's requests or receives
// (counted per QP, so reproducible).
func (a Action) onQP() bool { return a.onRequest() || a == FailRecv }

// onWire reports whether the action applies to RoCE datagrams.
func (a Action) onWire() bool { return a >= WireDrop && a <= WireReorder }

// Rule says which events an action hits.
type Rule struct {
	Action Action
	// Fail: the status (not success, not WR_FLUSH_ERR); FailRecv:
	// WCLocLenErr or WCLocProtErr.
	Status verbs.WCStatus
	Delay  time.Duration // Delay: how long

	// Which send requests (Fail, Delay, KillQP, Disconnect) or receives
	// (FailRecv): those of the device named Device ("": every device), of
	// the QP numbered QPNum (0: every QP), and for send requests with one
	// of Opcodes (none: every opcode).
	Device  string
	QPNum   uint32
	Opcodes []verbs.WROpcode

	// Nth hits the Nth matching request or receive of each QP (send
	// requests, receives) or the Nth event of the process (connection
	// requests, datagrams),
	// counting from 1; 0 means Fraction instead: that fraction of them,
	// chosen by the plan's seed.
	Nth      int
	Fraction float64
	// Limit is how many times the rule fires in all (0: no limit).
	Limit int
}

// Plan is a set of rules and the seed that chooses among the events they
// match. When several rules hit a request, the first one in Rules acts.
type Plan struct {
	Seed  uint64
	Rules []Rule
}

// Fired is one fault that happened.
type Fired struct {
	Rule   int // index in Plan.Rules
	Action Action
	// Device, QPOrd (the QP's creation order on the device, from 1), QPNum,
	// Seq (the request's posting order on its QP, from 1), WRID, Opcode and
	// Status are the send request's; for a receive (FailRecv), Seq is the
	// order in which the QP's incoming messages consumed receives, WRID
	// the receive's, Opcode zero; for connection and wire faults, Seq is
	// the event's number in the process.
	Device string
	QPOrd  uint64
	QPNum  uint32
	Seq    uint64
	WRID   uint64
	Opcode verbs.WROpcode
	Status verbs.WCStatus
}

func (f Fired) String() string {
	switch {
	case f.Action.onRequest():
		// Not the QP number: it differs from run to run.
		s := fmt.Sprintf("rule %d %v: %s QP #%d request %d (wr_id %d, %v)", f.Rule, f.Action, f.Device, f.QPOrd, f.Seq, f.WRID, f.Opcode)
		if f.Action == Fail {
			s += " -> " + f.Status.Name()
		}
		return s
	case f.Action == FailRecv:
		return fmt.Sprintf("rule %d %v: %s QP #%d receive %d (wr_id %d) -> %s", f.Rule, f.Action, f.Device, f.QPOrd, f.Seq, f.WRID, f.Status.Name())
	case f.Action == RefuseConnect:
		return fmt.Sprintf("rule %d %v: connection request %d", f.Rule, f.Action, f.Seq)
	}
	return fmt.Sprintf("rule %d %v: datagram %d", f.Rule, f.Action, f.Seq)
}

// ErrActive is returned by Inject while another plan is active.
var ErrActive = errors.New("faults: a plan is already active")

// Injector is an active plan.
type Injector struct {
	plan    Plan
	mu      sync.Mutex
	fired   []Fired
	count   []atomic.Int64 // times each rule fired
	perQP   sync.Map       // qpKey -> *[]int: matching requests per rule
	reqs    atomic.Uint64  // connection requests seen
	grams   atomic.Uint64  // datagrams seen
	stopped atomic.Bool
	restore func()
}

type qpKey struct {
	dev string
	ord uint64
}

var active atomic.Pointer[Injector]

// Inject turns plan on for the whole process until Stop.
func Inject(plan Plan) (*Injector, error) {
	for i, r := range plan.Rules {
		if err := r.check(); err != nil {
			return nil, fmt.Errorf("faults: rule %d: %w", i, err)
		}
	}
	in := &Injector{plan: plan, count: make([]atomic.Int64, len(plan.Rules))}
	if !active.CompareAndSwap(nil, in) {
		return nil, ErrActive
	}
	var wire, refuse, recv bool
	for _, r := range plan.Rules {
		wire = wire || r.Action.onWire()
		refuse = refuse || r.Action == RefuseConnect
		recv = recv || r.Action == FailRecv
	}
	engine.SetFaultHook(in.request)
	if recv {
		engine.SetRecvFaultHook(in.receive)
	}
	if refuse {
		cm.SetRefuseHook(in.refuse)
	}
	if wire {
		old := hook.RoCEWire.Set(in.datagram, false)
		in.restore = func() { hook.RoCEWire.Set(old, old == nil) }
	}
	return in, nil
}

func (r *Rule) check() error {
	switch {
	case r.Action < Fail || r.Action > FailRecv:
		return fmt.Errorf("unknown action %d", r.Action)
	case r.Action == Fail && (r.Status == verbs.WCSuccess || r.Status == verbs.WCWRFlushErr):
		return fmt.Errorf("fail needs an error status other than WR_FLUSH_ERR (which follows it), not %v", r.Status.Name())
	case r.Action == FailRecv && r.Status != verbs.WCLocLenErr && r.Status != verbs.WCLocProtErr:
		return fmt.Errorf("failrecv needs LOC_LEN_ERR or LOC_PROT_ERR (how a receive fails), not %v", r.Status.Name())
	case r.Action == FailRecv && len(r.Opcodes) > 0:
		return errors.New("failrecv takes no opcodes")
	case r.Action == Delay && r.Delay <= 0:
		return errors.New("delay needs a positive Delay")
	case r.Nth < 0 || r.Limit < 0:
		return errors.New("negative Nth or Limit")
	case r.Nth == 0 && (r.Fraction <= 0 || r.Fraction > 1 || math.IsNaN(r.Fraction)):
		return fmt.Errorf("a rule without nth needs a fraction in (0, 1], not %v", r.Fraction)
	}
	return nil
}

// Stop turns the plan off; requests already held back by a delay go out
// when it ends. It returns an error as capture.Recorder's Stop does, so
// that the two are stopped alike; turning a plan off cannot fail, and a
// second Stop does nothing, so it is always nil.
func (in *Injector) Stop() error {
	if !in.stopped.CompareAndSwap(false, true) {
		return nil
	}
	engine.SetFaultHook(nil)
	engine.SetRecvFaultHook(nil)
	cm.SetRefuseHook(nil)
	if in.restore != nil {
		in.restore()
	}
	active.CompareAndSwap(in, nil)
	return nil
}

// Fired returns the faults that fired, those of send requests first, by
// device, QP creation order and request order (the same from run to run
// for the same seed), then connection and wire faults in the order they
// happened.
func (in *Injector) Fired() []Fired {
	in.mu.Lock()
	out := slices.Clone(in.fired)
	in.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Fired) int {
		if a.Action.onQP() != b.Action.onQP() {
			if a.Action.onQP() {
				return -1
			}
			return 1
		}
		if !a.Action.onQP() {
			return cmp.Compare(a.Seq, b.Seq)
		}
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.QPOrd, b.QPOrd),
			cmp.Compare(recvRank(a.Action), recvRank(b.Action)), cmp.Compare(a.Seq, b.Seq))
	})
	return out
}

// recvRank orders a QP's receive faults after its request faults.
func recvRank(a Action) int {
	if a == FailRecv {
		return 1
	}
	return 0
}

// hit decides whether rule i fires on the event numbered n (from 1) of a
// sequence named by key.
func (in *Injector) hit(i int, key uint64, n uint64) bool {
	r := &in.plan.Rules[i]
	if r.Nth > 0 {
		if n != uint64(r.Nth) {
			return false
		}
	} else if unit(mix(in.plan.Seed, uint64(i), key, n)) >= r.Fraction {
		return false
	}
	if r.Limit > 0 && in.count[i].Add(1) > int64(r.Limit) {
		return false
	}
	return true
}

func (in *Injector) record(f Fired) {
	in.mu.Lock()
	in.fired = append(in.fired, f)
	in.mu.Unlock()
}

// request is the engine's fault hook.
func (in *Injector) request(p *engine.FaultPoint) engine.FaultAction {
	rules := in.plan.Rules
	var counts *[]uint64
	for i := range rules {
		r := &rules[i]
		if !r.Action.onRequest() || r.Device != "" && r.Device != p.Device || r.QPNum != 0 && r.QPNum != p.QPNum ||
			len(r.Opcodes) > 0 && !slices.Contains(r.Opcodes, p.WR.Opcode) {
			continue
		}
		if counts == nil {
			v, _ := in.perQP.LoadOrStore(qpKey{p.Device, p.QPOrd}, new([]uint64))
			counts = v.(*[]uint64)
			if len(*counts) < len(rules) {
				*counts = make([]uint64, len(rules)) // a QP's requests are asked about one at a time
			}
		}
		(*counts)[i]++
		if !in.hit(i, mix(hashString(p.Device), p.QPOrd), (*counts)[i]) {
			continue
		}
		f := Fired{Rule: i, Action: r.Action, Device: p.Device, QPOrd: p.QPOrd, QPNum: p.QPNum, Seq: p.Seq,
			WRID: p.WR.WRID, Opcode: p.WR.Opcode}
		var a engine.FaultAction
		switch r.Action {
		case Fail:
			a.Status, f.Status = r.Status, r.Status
		case Delay:
			a.Delay = r.Delay
		case KillQP:
			a.Fatal = true
		case Disconnect:
			a.Disconnect = true
		}
		in.record(f)
		return a
	}
	return engine.FaultAction{}
}

// receive is the engine's receive fault hook.
func (in *Injector) receive(p *engine.RecvFaultPoint) verbs.WCStatus {
	rules := in.plan.Rules
	for i := range rules {
		r := &rules[i]
		if r.Action != FailRecv || r.Device != "" && r.Device != p.Device || r.QPNum != 0 && r.QPNum != p.QPNum {
			continue
		}
		if !in.hit(i, mix(hashString(p.Device), p.QPOrd, 0x5245_4356), p.Seq) { // "RECV"
			continue
		}
		in.record(Fired{Rule: i, Action: r.Action, Device: p.Device, QPOrd: p.QPOrd, QPNum: p.QPNum, Seq: p.Seq,
			WRID: p.WRID, Status: r.Status})
		return r.Status
	}
	return verbs.WCSuccess
}

// refuse is the connection manager's hook.
func (in *Injector) refuse() bool {
	n := in.reqs.Add(1)
	for i, r := range in.plan.Rules {
		if r.Action == RefuseConnect && in.hit(i, 0, n) {
			in.record(Fired{Rule: i, Action: r.Action, Seq: n})
			return true
		}
	}
	return false
}

// datagram is the RoCE devices' wire hook.
func (in *Injector) datagram([]byte) hook.WireFault {
	n := in.grams.Add(1)
	for i, r := range in.plan.Rules {
		if !r.Action.onWire() || !in.hit(i, 1, n) {
			continue
		}
		in.record(Fired{Rule: i, Action: r.Action, Seq: n})
		switch r.Action {
		case WireDrop:
			return hook.WireDrop
		case WireDup:
			return hook.WireDup
		default:
			return hook.WireHold
		}
	}
	return hook.WirePass
}

// mix hashes its arguments (splitmix64 steps).
func mix(xs ...uint64) uint64 {
	h := uint64(0x9E3779B97F4A7C15)
	for _, x := range xs {
		h ^= x
		h += 0x9E3779B97F4A7C15
		h = (h ^ h>>30) * 0xBF58476D1CE4E5B9
		h = (h ^ h>>27) * 0x94D049BB133111EB
		h ^= h >> 31
	}
	return h
}

// unit maps h to [0, 1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// Parse reads a plan written as GOVERBS_FAULTS takes it: clauses separated
// by ";", the first may be "seed=N"; each other is an action (fail, delay,
// kill, disconnect, refuse, drop, dup, reorder, failrecv) followed by ":" and
// comma-separated settings: status=NAME (IBV_WC_ optional), d=DURATION,
// device=NAME, qp=N, op=NAME|NAME (IBV_WR_ optional), nth=N, p=FRACTION,
// limit=N. For example:
//
//	seed=7;fail:status=RETRY_EXC_ERR,op=RDMA_WRITE,p=0.01;kill:nth=1000,limit=1;failrecv:status=LOC_LEN_ERR,p=0.001
func Parse(spec string) (Plan, error) {
	var p Plan
	for i, clause := range strings.Split(spec, ";") {
		clause = strings.TrimSpace(clause)
		if clause == "" {
			continue
		}
		if v, ok := strings.CutPrefix(clause, "seed="); ok && i == 0 {
			s, err := strconv.ParseUint(v, 0, 64)
			if err != nil {
				return Plan{}, fmt.Errorf("faults: seed %q: %v", v, err)
			}
			p.Seed = s
			continue
		}
		name, settings, _ := strings.Cut(clause, ":")
		var r Rule
		for a, n := range actionNames {
			if n != "" && n == name {
				r.Action = Action(a)
			}
		}
		if r.Action == 0 {
			return Plan{}, fmt.Errorf("faults: %q: unknown action %q", clause, name)
		}
		for _, kv := range strings.Split(settings, ",") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			k, v, _ := strings.Cut(kv, "=")
			if err := r.set(k, v); err != nil {
				return Plan{}, fmt.Errorf("faults: %q: %s: %w", clause, k, err)
			}
		}
		if err := r.check(); err != nil {
			return Plan{}, fmt.Errorf("faults: %q: %w", clause, err)
		}
		p.Rules = append(p.Rules, r)
	}
	return p, nil
}

func (r *Rule) set(k, v string) error {
	var err error
	switch k {
	case "status":
		name := strings.ToUpper(v)
		if !strings.HasPrefix(name, "IBV_WC_") {
			name = "IBV_WC_" + name
		}
		for s := verbs.WCSuccess; s <= 255; s++ {
			if s.Name() == name {
				r.Status = s
				return nil
			}
		}
		return fmt.Errorf("unknown status %q", v)
	case "d":
		r.Delay, err = time.ParseDuration(v)
	case "device":
		r.Device = v
	case "qp":
		var n uint64
		n, err = strconv.ParseUint(v, 0, 32)
		r.QPNum = uint32(n)
	case "op":
		for _, name := range strings.Split(v, "|") {
			name = strings.TrimPrefix(strings.ToUpper(name), "IBV_WR_")
			found := false
			for op := verbs.WROpcode(0); op < 32; op++ {
				if op.String() == name {
					r.Opcodes, found = append(r.Opcodes, op), true
				}
			}
			if !found {
				return fmt.Errorf("unknown opcode %q", name)
			}
		}
	case "nth":
		r.Nth, err = strconv.Atoi(v)
	case "p":
		r.Fraction, err = strconv.ParseFloat(v, 64)
	case "limit":
		r.Limit, err = strconv.Atoi(v)
	default:
		return errors.New("unknown setting")
	}
	return err
}

// Env is the environment variable that turns a plan on (see Parse) in a
// program that links this package.
const Env = "GOVERBS_FAULTS"

// FromEnv is the injector GOVERBS_FAULTS turned on when the program
// started, or nil.
var FromEnv *Injector

func init() {
	spec := os.Getenv(Env)
	if spec == "" {
		return
	}
	p, err := Parse(spec)
	if err == nil {
		FromEnv, err = Inject(p)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "goverbs: %s ignored: %v\n", Env, err)
	}
}
