package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func v2req(ird, ord uint16) MPAFrame {
	return MPAFrame{Enhanced: true, Rev: 2, V2: true, IRD: ird, ORD: ord}
}

func TestNegotiateResponder(t *testing.T) {
	pd := []byte("server")
	for _, c := range []struct {
		name  string
		req   MPAFrame
		local Local
		reply MPAFrame
		n     Negotiated
		err   error
	}{
		{
			name:  "rping",
			req:   v2req(1, 1),
			local: Local{IRD: 1, ORD: 1},
			reply: MPAFrame{Reply: true, Enhanced: true, Rev: 2, V2: true, IRD: 1, ORD: 1},
			n:     Negotiated{IRD: 1, ORD: 1, V2: true},
		},
		{
			name:  "markers: reject, M cleared, flags and rev echoed, no pdata",
			req:   MPAFrame{Markers: true, CRC: true, Enhanced: true, Rev: 2, V2: true, IRD: 1, ORD: 1, Private: pd},
			local: Local{IRD: 1, ORD: 1, Private: pd},
			reply: MPAFrame{Reply: true, Reject: true, CRC: true, Enhanced: true, Rev: 2},
			err:   ErrMPAMarkers,
		},
		{
			name:  "enhanced with PD_Length < 4: reject",
			req:   MPAFrame{Enhanced: true, Rev: 2, Private: []byte{0, 1}},
			local: Local{IRD: 1, ORD: 1},
			reply: MPAFrame{Reply: true, Reject: true, Enhanced: true, Rev: 2},
			err:   ErrMPAEnhancedShort,
		},
		{
			name:  "peer asks CRC: echoed",
			req:   MPAFrame{CRC: true, Enhanced: true, Rev: 2, V2: true, IRD: 2, ORD: 2},
			local: Local{IRD: 2, ORD: 2},
			reply: MPAFrame{Reply: true, CRC: true, Enhanced: true, Rev: 2, V2: true, IRD: 2, ORD: 2},
			n:     Negotiated{IRD: 2, ORD: 2, CRC: true, V2: true},
		},
		{
			name:  "we ask CRC: on",
			req:   v2req(2, 2),
			local: Local{IRD: 2, ORD: 2, CRC: true},
			reply: MPAFrame{Reply: true, CRC: true, Enhanced: true, Rev: 2, V2: true, IRD: 2, ORD: 2},
			n:     Negotiated{IRD: 2, ORD: 2, CRC: true, V2: true},
		},
		{
			name:  "rev 1 peer: no IRD/ORD exchange, pdata verbatim",
			req:   MPAFrame{Rev: 1, Private: []byte("client")},
			local: Local{IRD: 3, ORD: 5, Private: pd},
			reply: MPAFrame{Reply: true, Rev: 1, Private: pd},
			n:     Negotiated{IRD: 3, ORD: 5},
		},
		{
			name:  "rev 1 with the Enhanced bit: echoed, still no exchange",
			req:   MPAFrame{Rev: 1, Enhanced: true, Private: []byte{0, 1, 0, 1}},
			local: Local{IRD: 3, ORD: 5},
			reply: MPAFrame{Reply: true, Rev: 1, Enhanced: true},
			n:     Negotiated{IRD: 3, ORD: 5},
		},
		{
			name:  "rev 0 peer: echoed",
			req:   MPAFrame{Rev: 0},
			local: Local{IRD: 1, ORD: 1},
			reply: MPAFrame{Reply: true, Rev: 0},
			n:     Negotiated{IRD: 1, ORD: 1},
		},
		{
			name:  "clamp my ORD to the peer's IRD 0 (perftest)",
			req:   v2req(0, 0),
			local: Local{IRD: 4, ORD: 4},
			reply: MPAFrame{Reply: true, Enhanced: true, Rev: 2, V2: true, IRD: 4, ORD: 0},
			n:     Negotiated{IRD: 4, ORD: 0, V2: true},
		},
		{
			name:  "raise my IRD to the peer's ORD",
			req:   v2req(16, 16),
			local: Local{IRD: 1, ORD: 1},
			reply: MPAFrame{Reply: true, Enhanced: true, Rev: 2, V2: true, IRD: 16, ORD: 1},
			n:     Negotiated{IRD: 16, ORD: 1, V2: true},
		},
		{
			name:  "peer values above the maximum are capped at 128",
			req:   v2req(1000, 1000),
			local: Local{IRD: 128, ORD: 128},
			reply: MPAFrame{Reply: true, Enhanced: true, Rev: 2, V2: true, IRD: 128, ORD: 128},
			n:     Negotiated{IRD: 128, ORD: 128, V2: true},
		},
		{
			name:  "peer ORD above the maximum raises my IRD only to the maximum",
			req:   v2req(1, 0x3FFF),
			local: Local{IRD: 0, ORD: 8, Max: 64},
			reply: MPAFrame{Reply: true, Enhanced: true, Rev: 2, V2: true, IRD: 64, ORD: 1},
			n:     Negotiated{IRD: 64, ORD: 1, V2: true},
		},
		{
			name:  "P2P: write offered with read: write",
			req:   MPAFrame{Enhanced: true, Rev: 2, V2: true, P2P: true, RTR: RTRWrite | RTRRead | RTRSend, IRD: 1, ORD: 1},
			local: Local{IRD: 1, ORD: 1},
			reply: MPAFrame{Reply: true, Enhanced: true, Rev: 2, V2: true, P2P: true, RTR: RTRWrite, IRD: 1, ORD: 1},
			n:     Negotiated{IRD: 1, ORD: 1, V2: true, RTR: RTRWrite},
		},
		{
			name:  "P2P: read only: read",
			req:   MPAFrame{Enhanced: true, Rev: 2, V2: true, P2P: true, RTR: RTRRead, IRD: 1, ORD: 1},
			local: Local{IRD: 1, ORD: 1},
			reply: MPAFrame{Reply: true, Enhanced: true, Rev: 2, V2: true, P2P: true, RTR: RTRRead, IRD: 1, ORD: 1},
			n:     Negotiated{IRD: 1, ORD: 1, V2: true, RTR: RTRRead},
		},
		{
			name:  "P2P: send only: propose write",
			req:   MPAFrame{Enhanced: true, Rev: 2, V2: true, P2P: true, RTR: RTRSend, IRD: 1, ORD: 1},
			local: Local{IRD: 1, ORD: 1},
			reply: MPAFrame{Reply: true, Enhanced: true, Rev: 2, V2: true, P2P: true, RTR: RTRWrite, IRD: 1, ORD: 1},
			n:     Negotiated{IRD: 1, ORD: 1, V2: true, RTR: RTRWrite},
		},
		{
			name:  "P2P: nothing offered: propose write",
			req:   MPAFrame{Enhanced: true, Rev: 2, V2: true, P2P: true, IRD: 1, ORD: 1},
			local: Local{IRD: 1, ORD: 1},
			reply: MPAFrame{Reply: true, Enhanced: true, Rev: 2, V2: true, P2P: true, RTR: RTRWrite, IRD: 1, ORD: 1},
			n:     Negotiated{IRD: 1, ORD: 1, V2: true, RTR: RTRWrite},
		},
		{
			name:  "RTR bits without P2P are ignored",
			req:   MPAFrame{Enhanced: true, Rev: 2, V2: true, RTR: RTRRead, IRD: 1, ORD: 1},
			local: Local{IRD: 1, ORD: 1},
			reply: MPAFrame{Reply: true, Enhanced: true, Rev: 2, V2: true, IRD: 1, ORD: 1},
			n:     Negotiated{IRD: 1, ORD: 1, V2: true},
		},
		{name: "a Reply is dropped", req: MPAFrame{Reply: true, Rev: 1}, local: Local{}, err: ErrMPAKey},
		{name: "rev 3 is dropped", req: MPAFrame{Rev: 3}, local: Local{}, err: ErrMPARevision},
		{name: "local IRD above the maximum", req: v2req(1, 1), local: Local{IRD: 129}, err: ErrIRDORDRange},
		{name: "local ORD negative", req: v2req(1, 1), local: Local{ORD: -1}, err: ErrIRDORDRange},
		{
			name:  "reply pdata too long with the v2 block",
			req:   v2req(1, 1),
			local: Local{Private: make([]byte, 509)},
			err:   ErrMPAPrivateTooLong,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, n, err := NegotiateResponder(c.req, c.local)
			if !errors.Is(err, c.err) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if !reflect.DeepEqual(rep, c.reply) {
				t.Errorf("reply %+v\nwant  %+v", rep, c.reply)
			}
			if n != c.n {
				t.Errorf("negotiated %+v, want %+v", n, c.n)
			}
			if rep.Reply {
				if _, err := AppendMPA(nil, &rep); err != nil {
					t.Errorf("reply does not encode: %v", err)
				}
			}
		})
	}
}

func TestNegotiateResponderReplyBytes(t *testing.T) {
	req, err := ParseMPA(unhex(t, rpingRequest))
	if err != nil {
		t.Fatal(err)
	}
	rep, _, err := NegotiateResponder(req, Local{IRD: 1, ORD: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := AppendMPA(nil, &rep)
	want := unhex(t, "4D 50 41 20 49 44 20 52 65 70 20 46 72 61 6D 65   10 02 00 04   00 01 00 01")
	if !bytes.Equal(b, want) {
		t.Fatalf("reply % X", b)
	}
	// The markers reject as siw sends it: 20 bytes, R set, M cleared.
	req.Markers = true
	rep, _, err = NegotiateResponder(req, Local{IRD: 1, ORD: 1})
	if !errors.Is(err, ErrMPAMarkers) {
		t.Fatal(err)
	}
	b, _ = AppendMPA(nil, &rep)
	if want := unhex(t, "4D 50 41 20 49 44 20 52 65 70 20 46 72 61 6D 65   30 02 00 00"); !bytes.Equal(b, want) {
		t.Fatalf("reject % X", b)
	}
	if f, err := ParseMPA(b); err != nil || !f.Reject {
		t.Fatalf("reject does not parse: %+v %v", f, err)
	}
}

func TestRejectReply(t *testing.T) {
	rep, ok := RejectReply(MPAFrame{CRC: true, Enhanced: true, Rev: 2, V2: true, IRD: 5, ORD: 5}, []byte("no"))
	want := MPAFrame{Reply: true, Reject: true, CRC: true, Enhanced: true, Rev: 2, V2: true, Private: []byte("no")}
	if !ok || !reflect.DeepEqual(rep, want) {
		t.Fatalf("%+v %v", rep, ok)
	}
	b, err := AppendMPA(nil, &rep)
	if err != nil || !bytes.Equal(b[16:], unhex(t, "70 02 0006 0000 0000 6E6F")) {
		t.Fatalf("% X %v", b, err)
	}
	rep, ok = RejectReply(MPAFrame{Rev: 1}, nil)
	if !ok || !reflect.DeepEqual(rep, MPAFrame{Reply: true, Reject: true, Rev: 1}) {
		t.Fatalf("rev 1: %+v %v", rep, ok)
	}
	if _, ok := RejectReply(MPAFrame{Rev: 0}, nil); ok {
		t.Fatal("rev 0 reject must close without a Reply")
	}
}

func TestNewRequest(t *testing.T) {
	f, err := NewRequest(Local{IRD: 2, ORD: 3, CRC: true, RTR: RTRWrite | RTRRead, Private: []byte{7}})
	want := MPAFrame{CRC: true, Enhanced: true, Rev: 2, V2: true, P2P: true, RTR: RTRWrite | RTRRead, IRD: 2, ORD: 3, Private: []byte{7}}
	if err != nil || !reflect.DeepEqual(f, want) {
		t.Fatalf("%+v %v", f, err)
	}
	if _, err := NewRequest(Local{IRD: 129}); !errors.Is(err, ErrIRDORDRange) {
		t.Errorf("IRD 129: %v", err)
	}
	if _, err := NewRequest(Local{IRD: 200, Max: 256}); err != nil {
		t.Errorf("IRD 200 of 256: %v", err)
	}
	if _, err := NewRequest(Local{Private: make([]byte, 509)}); !errors.Is(err, ErrMPAPrivateTooLong) {
		t.Errorf("509 bytes: %v", err)
	}
}

func TestNegotiateInitiator(t *testing.T) {
	sent := v2req(1, 1)
	rep := func(ird, ord uint16) MPAFrame {
		return MPAFrame{Reply: true, Enhanced: true, Rev: 2, V2: true, IRD: ird, ORD: ord}
	}
	p2p := func(offer RTR) MPAFrame {
		f := v2req(1, 1)
		f.P2P, f.RTR = true, offer
		return f
	}
	p2pRep := func(pick RTR) MPAFrame {
		f := rep(1, 1)
		f.P2P, f.RTR = true, pick
		return f
	}
	with := func(f MPAFrame, mod func(*MPAFrame)) MPAFrame { mod(&f); return f }
	for _, c := range []struct {
		name        string
		sent, reply MPAFrame
		local       Local
		n           Negotiated
		err         error
		term        *TermError
	}{
		{name: "rping", sent: sent, reply: rep(1, 1), local: Local{IRD: 1, ORD: 1},
			n: Negotiated{IRD: 1, ORD: 1, V2: true}},
		{name: "adopt: IRD := peer ORD, ORD := peer IRD", sent: sent, reply: rep(8, 4), local: Local{IRD: 1, ORD: 1},
			n: Negotiated{IRD: 4, ORD: 8, V2: true}},
		{name: "adopt lowers too", sent: v2req(16, 16), reply: rep(2, 0), local: Local{IRD: 16, ORD: 16},
			n: Negotiated{IRD: 0, ORD: 2, V2: true}},
		{name: "peer IRD above the maximum: ORD capped", sent: sent, reply: rep(1000, 1), local: Local{IRD: 1, ORD: 1},
			n: Negotiated{IRD: 1, ORD: 128, V2: true}},
		{name: "peer ORD above own IRD but within the maximum: IRD raised", sent: sent, reply: rep(1, 100),
			local: Local{IRD: 1, ORD: 1}, n: Negotiated{IRD: 100, ORD: 1, V2: true}},
		{name: "insufficient IRD", sent: sent, reply: rep(1, 200), local: Local{IRD: 1, ORD: 1},
			err: ErrInsufficientIRD, term: &TermError{Layer: LayerLLP, EType: 0, Code: 0x06}},
		{name: "peer ORD 200 fits a maximum of 256", sent: sent, reply: rep(1, 200), local: Local{IRD: 1, ORD: 1, Max: 256},
			n: Negotiated{IRD: 200, ORD: 1, V2: true}},
		{name: "peer asks CRC", sent: sent, reply: with(rep(1, 1), func(f *MPAFrame) { f.CRC = true }),
			local: Local{IRD: 1, ORD: 1}, n: Negotiated{IRD: 1, ORD: 1, CRC: true, V2: true}},
		{name: "we asked CRC", sent: with(sent, func(f *MPAFrame) { f.CRC = true }), reply: rep(1, 1),
			local: Local{IRD: 1, ORD: 1}, n: Negotiated{IRD: 1, ORD: 1, CRC: true, V2: true}},
		{name: "rejected", sent: sent, reply: MPAFrame{Reply: true, Reject: true, Enhanced: true, Rev: 2},
			err: ErrMPARejected},
		{name: "markers", sent: sent, reply: with(rep(1, 1), func(f *MPAFrame) { f.Markers = true }), err: ErrMPAMarkers},
		{name: "request key", sent: sent, reply: v2req(1, 1), err: ErrMPAKey,
			term: &TermError{Layer: LayerLLP, EType: 0, Code: 0x04}},
		{name: "rev 3", sent: sent, reply: MPAFrame{Reply: true, Rev: 3}, err: ErrMPARevision},
		{name: "rev 1 reply to an enhanced request", sent: sent, reply: MPAFrame{Reply: true, Rev: 1}, err: ErrMPANotEnhanced},
		{name: "rev 2 reply without Enhanced", sent: sent, reply: MPAFrame{Reply: true, Rev: 2}, err: ErrMPANotEnhanced},
		{name: "enhanced reply without the v2 block", sent: sent, reply: MPAFrame{Reply: true, Enhanced: true, Rev: 2},
			err: ErrMPANotEnhanced},
		{name: "rev 1 both ways: local IRD/ORD", sent: MPAFrame{Rev: 1}, reply: MPAFrame{Reply: true, Rev: 1},
			local: Local{IRD: 3, ORD: 2}, n: Negotiated{IRD: 3, ORD: 2}},
		{name: "P2P: write chosen", sent: p2p(RTRWrite | RTRRead), reply: p2pRep(RTRWrite),
			n: Negotiated{IRD: 1, ORD: 1, V2: true, RTR: RTRWrite}},
		{name: "P2P: write preferred when both come back", sent: p2p(RTRWrite | RTRRead), reply: p2pRep(RTRWrite | RTRRead),
			n: Negotiated{IRD: 1, ORD: 1, V2: true, RTR: RTRWrite}},
		{name: "P2P: read chosen", sent: p2p(RTRWrite | RTRRead), reply: p2pRep(RTRRead),
			n: Negotiated{IRD: 1, ORD: 1, V2: true, RTR: RTRRead}},
		{name: "P2P: send chosen", sent: p2p(RTRSend), reply: p2pRep(RTRSend),
			n: Negotiated{IRD: 1, ORD: 1, V2: true, RTR: RTRSend}},
		{name: "P2P: no match", sent: p2p(RTRRead), reply: p2pRep(RTRWrite), err: ErrNoMatchingRTR,
			term: &TermError{Layer: LayerLLP, EType: 0, Code: 0x07}},
		{name: "P2P: nothing chosen", sent: p2p(RTRWrite), reply: rep(1, 1), err: ErrNoMatchingRTR,
			term: &TermError{Layer: LayerLLP, EType: 0, Code: 0x07}},
		{name: "P2P reply to a non-P2P request is ignored", sent: sent, reply: p2pRep(RTRWrite),
			n: Negotiated{IRD: 1, ORD: 1, V2: true}},
		{name: "local out of range", sent: sent, reply: rep(1, 1), local: Local{IRD: 1000}, err: ErrIRDORDRange},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := NegotiateInitiator(c.sent, c.reply, c.local)
			if !errors.Is(err, c.err) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if n != c.n {
				t.Errorf("negotiated %+v, want %+v", n, c.n)
			}
			term := MPATerm(err)
			if !reflect.DeepEqual(term, c.term) {
				t.Errorf("MPATerm %v, want %v", term, c.term)
			}
		})
	}
}

// Both sides through the encoder and the parser agree: my ORD never
// exceeds the peer's IRD.
func TestNegotiateEndToEnd(t *testing.T) {
	vals := []int{0, 1, 2, 16, 128}
	for _, ci := range vals {
		for _, co := range vals {
			for _, si := range vals {
				for _, so := range vals {
					req, err := NewRequest(Local{IRD: ci, ORD: co})
					if err != nil {
						t.Fatal(err)
					}
					b, _ := AppendMPA(nil, &req)
					preq, err := ParseMPA(b)
					if err != nil {
						t.Fatal(err)
					}
					rep, sn, err := NegotiateResponder(preq, Local{IRD: si, ORD: so})
					if err != nil {
						t.Fatal(err)
					}
					b, _ = AppendMPA(nil, &rep)
					prep, err := ParseMPA(b)
					if err != nil {
						t.Fatal(err)
					}
					cn, err := NegotiateInitiator(req, prep, Local{IRD: ci, ORD: co})
					if err != nil {
						t.Fatalf("c %d/%d s %d/%d: %v", ci, co, si, so, err)
					}
					if cn.ORD > sn.IRD || sn.ORD > cn.IRD || cn.ORD != sn.IRD || cn.IRD != sn.ORD {
						t.Errorf("c %d/%d s %d/%d: client %+v server %+v", ci, co, si, so, cn, sn)
					}
				}
			}
		}
	}
}
