//go:build rdmacore && linux && cgo

package rdmacore

/*
#include "gv.h"
*/
import "C"

import (
	"fmt"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// cWriteLoop runs n signaled RDMA WRITEs on qp, each posted and polled from
// cq in C: the baseline the benchmarks compare the cgo path with.
func cWriteLoop(qp *verbs.QP, cq *verbs.CQ, n int, sge verbs.SGE, raddr uint64, rkey uint32) error {
	q, _ := driver.QPOf(qp).(*queuePair)
	c, _ := driver.CQOf(cq).(*complQueue)
	if q == nil || c == nil {
		return fmt.Errorf("%w: objects of another provider", verbs.ErrInvalid)
	}
	s := C.struct_ibv_sge{addr: C.uint64_t(sge.Addr), length: C.uint32_t(sge.Length), lkey: C.uint32_t(sge.LKey)}
	if rc := C.gv_bench_write(q.ptr, c.ptr, C.int(n), &s, C.uint64_t(raddr), C.uint32_t(rkey)); rc != 0 {
		return fmt.Errorf("%w: C loop failed (%d)", verbs.ErrInvalid, int(rc))
	}
	return nil
}

// cPollEmpty polls cq n times from C, 16 entries at a time; it returns how
// many completions it found (none on an idle CQ).
func cPollEmpty(cq *verbs.CQ, n int) int {
	c, _ := driver.CQOf(cq).(*complQueue)
	if c == nil {
		return -1
	}
	return int(C.gv_bench_poll_empty(c.ptr, C.int(n)))
}

// cgoNop crosses into C and back, doing nothing there.
func cgoNop(x int) int { return int(C.gv_nop(C.int(x))) }
