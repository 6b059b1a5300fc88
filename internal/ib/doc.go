// Package ib is the InfiniBand transport as RoCEv2 carries it, in wire
// formats: the base transport header (BTH) and its extension headers
// (RETH, AETH, ImmDt, IETH, AtomicETH, AtomicAckETH, DETH), the invariant
// CRC (ICRC) of a RoCEv2 packet, and the Communication Management MADs
// (REQ, REP, RTU, REJ, MRA, DREQ, DREP, SIDR) with rdma_cm's header, as
// Linux rxe and RoCE NICs speak them (IBA volume 1, chapters 9, 12 and 16;
// annex A17).
//
// Headers are views over byte slices with accessors; a packet is parsed
// into a Packet value that refers to the slice (no allocation), and every
// parser checks every length before it reads.
package ib
