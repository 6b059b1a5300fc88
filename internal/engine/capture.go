package engine

import (
	"github.com/goverbs/goverbs/internal/hook"
	"github.com/goverbs/goverbs/verbs"
)

// Packet capture of devices without a wire of their own (loop, shm): the
// engine shows a hook each send request as it goes out and as it
// completes, and the hook synthesizes the packets a RoCE wire would carry.
// A device whose transport captures its real packets or stream (roce,
// iwarp) sets Config.OwnCapture.

// CaptureOp is a send request as capture sees it.
type CaptureOp struct {
	Device        string
	QPNum         uint32
	DestQPN       uint32    // RC: the connected QP; UD: the WR's RemoteQPN
	Local, Remote verbs.GID // Remote is zero when the QP has no address vector (connected by a CM)
	UD            bool
	WR            *verbs.SendWR
	Len           uint32
	// Data is the outgoing payload (Done false), or what a READ or an
	// atomic brought back (Done true, success).
	Data   [][]byte
	Done   bool
	Status verbs.WCStatus
}

// CaptureHook receives the operations of devices without OwnCapture.
type CaptureHook func(op *CaptureOp)

var captureHook hook.Hook[CaptureHook]

// SetCaptureHook sets the process's capture hook (nil: none) and returns
// the one it replaces.
func SetCaptureHook(h CaptureHook) CaptureHook { return captureHook.Set(h, h == nil) }

// capture shows w to the hook h, going out or done; q.mu is held.
func (q *QP) capture(h CaptureHook, w *WQE, done bool) {
	if q.dev.cfg.OwnCapture {
		return
	}
	if !done {
		if w.capd {
			return // shown already: a request the transport sent again
		}
		w.capd = true
	}
	op := CaptureOp{Device: q.dev.cfg.Name, QPNum: q.num, DestQPN: q.attr.DestQPNum, Local: q.dev.cfg.GID,
		WR: &w.WR, Len: w.Len, Done: done, Status: w.status}
	if q.attr.AHAttr.IsGlobal {
		op.Remote = q.attr.AHAttr.GRH.DGID
	}
	if q.typ == verbs.QPTUD {
		op.UD = true
		op.DestQPN = w.WR.RemoteQPN
		if w.WR.AH != nil {
			if a := w.WR.AH.Attr(); a.IsGlobal {
				op.Remote = a.GRH.DGID
			}
		}
	}
	var segs [][]byte
	switch {
	case !done:
		if w.WR.Opcode != verbs.WRRDMARead && w.WR.Opcode != verbs.WRAtomicCmpAndSwp && w.WR.Opcode != verbs.WRAtomicFetchAndAdd {
			segs, _ = q.payload(w, nil)
		}
	case w.status == verbs.WCSuccess && (w.WR.Opcode == verbs.WRRDMARead || w.WR.Opcode == verbs.WRAtomicCmpAndSwp || w.WR.Opcode == verbs.WRAtomicFetchAndAdd):
		segs, _ = q.segments(nil, w.WR.SGList, nil, verbs.AccessLocalWrite)
	}
	op.Data = segs
	h(&op)
}
