package verbs

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
)

// A Tracer follows work requests through their lives: each request as it is
// posted, each completion as the application polls it (wc.WRID ties the
// two). It is called synchronously on the posting and polling goroutines,
// for every provider: keep it cheap, or hand the record off. Connect it to
// log/slog (SlogTracer) or to a tracing system (an OpenTelemetry span per
// WRID, say) without goverbs depending on either.
type Tracer interface {
	SendPosted(qp *QP, wr *SendWR)
	RecvPosted(qp *QP, wr *RecvWR) // qp nil: posted to an SRQ
	Completed(cq *CQ, wc *WC)
}

type tracerBox struct{ t Tracer }

var tracer atomic.Pointer[tracerBox]

// SetTracer makes t the process's tracer (nil: none) and returns the one it
// replaces. With none, the cost is one atomic load per post and per poll.
func SetTracer(t Tracer) Tracer {
	var b *tracerBox
	if t != nil {
		b = &tracerBox{t}
	}
	if old := tracer.Swap(b); old != nil {
		return old.t
	}
	return nil
}

// traceSend reports the requests of wrs that were posted: all of them, or
// those before the one err names.
func traceSend(qp *QP, wrs []SendWR, err error) {
	b := tracer.Load()
	if b == nil {
		return
	}
	for i := range postedCount(len(wrs), err) {
		b.t.SendPosted(qp, &wrs[i])
	}
}

func traceRecv(qp *QP, wrs []RecvWR, err error) {
	b := tracer.Load()
	if b == nil {
		return
	}
	for i := range postedCount(len(wrs), err) {
		b.t.RecvPosted(qp, &wrs[i])
	}
}

func postedCount(n int, err error) int {
	if err == nil {
		return n
	}
	if pe := (*PostError)(nil); errors.As(err, &pe) && pe.Index <= n {
		return pe.Index
	}
	return 0
}

// SlogTracer returns a Tracer that logs every post and completion to l at
// level Debug (records are built only when l is enabled for Debug).
func SlogTracer(l *slog.Logger) Tracer { return slogTracer{l} }

type slogTracer struct{ l *slog.Logger }

func (s slogTracer) SendPosted(qp *QP, wr *SendWR) {
	if s.l.Enabled(context.Background(), slog.LevelDebug) {
		s.l.Debug("rdma post send", "qp", qp.Num(), "wr_id", wr.WRID, "opcode", wr.Opcode.String(), "sges", len(wr.SGList), "flags", uint32(wr.Flags))
	}
}

func (s slogTracer) RecvPosted(qp *QP, wr *RecvWR) {
	if s.l.Enabled(context.Background(), slog.LevelDebug) {
		n := uint32(0)
		if qp != nil {
			n = qp.Num()
		}
		s.l.Debug("rdma post recv", "qp", n, "wr_id", wr.WRID, "sges", len(wr.SGList))
	}
}

func (s slogTracer) Completed(cq *CQ, wc *WC) {
	if s.l.Enabled(context.Background(), slog.LevelDebug) {
		s.l.Debug("rdma completion", "qp", wc.QPNum, "wr_id", wc.WRID, "status", wc.Status.Name(), "opcode", wc.Opcode.String(), "byte_len", wc.ByteLen)
	}
}
