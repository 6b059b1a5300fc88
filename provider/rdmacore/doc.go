// Package rdmacore is goverbs' provider for real RDMA devices: it registers
// every device rdma-core's libibverbs finds (mlx5_0, rxe0, siw0, ...) under
// its own name, with the verbs API the pure-Go providers offer.
//
// It is built only with the build tag rdmacore (and cgo, on Linux), linking
// libibverbs and librdmacm (Debian: libibverbs-dev, librdmacm-dev):
//
//	go build -tags rdmacore ./...
//
// Without the tag the package is empty and needs neither cgo nor
// rdma-core; Available tells which build a program has.
//
// The hot paths cross into C once per batch, not once per work request:
// PostSend and PostRecv fill plain C structs in memory the QP owns and one
// C helper links up to 32 of them into a list for one ibv_post_send;
// CQ.Poll is one ibv_poll_cq straight into the caller's []verbs.WC (whose
// layout is struct ibv_wc's). Completion channels and the async-event
// descriptor are waited on through Go's netpoller, so a blocked GetEvent,
// Wait or GetAsyncEvent parks a goroutine, not an OS thread.
//
// Memory: RegMR takes verbs.AllocBuffer memory (outside the Go heap) or Go
// memory, which stays pinned (runtime.Pinner) until Dereg. Registration
// pins pages in the kernel too, against RLIMIT_MEMLOCK: when that limit is
// the reason RegMR fails, its error says so and how to raise it.
//
// Not available through this provider: FLUSH and ATOMIC_WRITE (they need
// the extended post API, ibv_wr_*, which this provider does not use yet;
// its devices report neither verbs.DeviceFlushGlobal,
// verbs.DeviceFlushPersistent nor verbs.DeviceAtomicWrite in
// DeviceAttr.DeviceCapFlagsEx, and refuse the opcodes and the FLUSH access
// flags with verbs.ErrNotSupported), memory windows, ibv_rereg_mr and
// ibv_resize_cq (PD.AllocMW, MR.Rereg and CQ.Resize return
// verbs.ErrNotSupported), XRC. Devices plugged in after the first
// verbs.Devices call are not seen by the process.
package rdmacore
