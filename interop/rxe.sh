#!/usr/bin/env bash
# Interoperability of goverbs' RoCEv2 provider (provider/roce, roce://
# addresses) with the Linux soft-RoCE driver (rxe) and the rdma-core tools,
# in the VM of ../shared/vmlab (root needed; see its README).
#
#   interop/rxe.sh                    every case, both directions
#   SIZES="64 4096" COUNT=20 interop/rxe.sh
#   PT_TESTS="send_lat atomic_lat" interop/rxe.sh
#   KEEP=1 interop/rxe.sh             leave the VM running afterwards
#
# goverbs runs on the host inside the lab's network namespace (10.78.0.1,
# an ordinary UDP socket on port 4791: no RDMA device, module or root
# needed for it), the rdma-core programs in the guest (10.78.0.2, device
# rxe0). Cases: rping with -V at each of $SIZES, rdma_client/rdma_server,
# udaddy (rdma_cm's UDP port space: SIDR, then UD datagrams both ways),
# and perftest with -R (send/write/read bandwidth and latency, and
# atomic_lat) at each of $PT_SIZES; each in both roles. One line per case,
# then a summary; the exit status is non-zero if any case failed. The guest
# runs under emulation: timeouts are generous.
#
# Not covered: librpma's examples (package rpma has no roce:// path yet).
set -uo pipefail
cd "$(dirname "$0")/.."
LAB=${VMLAB:-../shared/vmlab/vmlab.sh}
[ -x "$LAB" ] || { echo "$0: no lab at $LAB: set VMLAB to the lab's vmlab.sh (see README.md, the interop scripts)" >&2; exit 2; }
BIN=${BIN:-/tmp/goverbs-interop}
COUNT=${COUNT:-100}
SIZES=${SIZES:-"64 1024 4096 16384 65535"}
PT_TESTS=${PT_TESTS:-"send_bw write_bw read_bw send_lat write_lat read_lat atomic_lat"}
PT_SIZES=${PT_SIZES:-"8 65536"}
HOST=10.78.0.1
GUEST=10.78.0.2

export PATH="/usr/local/go/bin:$PATH"
mkdir -p "$BIN"
go build -o "$BIN/goverbs" ./cmd/goverbs || exit 1
go build -o "$BIN/rdma_server" ./examples/rdma_server || exit 1
go build -o "$BIN/rdma_client" ./examples/rdma_client || exit 1
go build -o "$BIN/udaddy" ./examples/udaddy || exit 1

start=$(date +%s)
TIMEOUT=20 "$LAB" exec true >/dev/null 2>&1 || { "$LAB" build >/dev/null 2>&1 && "$LAB" start >/dev/null 2>&1; } || exit 1

pass=0; fail=0
LOGS=${LOGS:-/tmp/goverbs-interop/logs}
mkdir -p "$LOGS"
result() { # name rc
	if [ "$2" = 0 ]; then echo "PASS $1"; pass=$((pass+1)); else
		echo "FAIL $1"; fail=$((fail+1))
		n=$(echo "$1" | tr -c 'A-Za-z0-9' _)
		{ echo "== host side"; cat /tmp/rxe-host.log; echo "== goverbs server"; cat /tmp/rxe-srv.log 2>/dev/null
		  echo "== guest"; "$LAB" exec 'cat /tmp/peer.log; cat /sys/class/infiniband/rxe0/ports/1/hw_counters/*' 2>&1; } > "$LOGS/$n.log" 2>&1
		echo "     (details in $LOGS/$n.log)"
	fi
}
# guest_bg CMD PORT: run a server in the guest and wait until its rdma_cm
# ID listens on rxe0.
guest_bg() {
	"$LAB" exec "pkill -x rping; pkill -x rdma_server; pkill -x udaddy; pkill -f '^ib_'; sleep 0.3; rm -f /tmp/peer.log; (timeout 120 $1 > /tmp/peer.log 2>&1; echo rc=\$? >> /tmp/peer.log) &" >/dev/null
	"$LAB" exec "for i in \$(seq 100); do rdma res show cm_id | grep 'rxe0' | grep 'LISTEN' | grep -q ':$2 ' && exit 0; sleep 0.1; done; exit 1" >/dev/null
}
# guest_rc: wait for the guest server to exit and check its status.
# The guest is emulated: on a loaded host its perftest server has been seen
# to end a minute after the client, so it gets two.
guest_rc() { TIMEOUT=150 "$LAB" exec 'for i in $(seq 1200); do grep -q "^rc=" /tmp/peer.log 2>/dev/null && break; sleep 0.1; done; cat /tmp/peer.log' | grep -q '^rc=0'; }
# host_bg CMD PATTERN: run a goverbs server on the host side and wait until
# its log shows PATTERN (it listens).
host_bg() {
	rm -f /tmp/rxe-srv.log
	"$LAB" host "(timeout 120 $1 > /tmp/rxe-srv.log 2>&1; echo rc=\$? >> /tmp/rxe-srv.log) &" >/dev/null
	for i in $(seq 100); do grep -q "$2" /tmp/rxe-srv.log 2>/dev/null && return 0; sleep 0.05; done
	return 1
}
host_rc() { for i in $(seq 300); do grep -q '^rc=' /tmp/rxe-srv.log 2>/dev/null && break; sleep 0.1; done; grep -q '^rc=0' /tmp/rxe-srv.log; }

for S in $SIZES; do
	guest_bg "rping -s -a $GUEST -p 7174 -C $COUNT -V -S $S" 7174
	"$LAB" host "$BIN/goverbs ping -c -a roce://$GUEST -p 7174 -C $COUNT -V -S $S --timeout 30s" >/tmp/rxe-host.log 2>&1
	rc=$?; guest_rc || rc=1
	result "goverbs ping -c roce://  ->  rping -s (rxe)   -S $S -C $COUNT -V" $rc

	host_bg "$BIN/goverbs ping -s -d -a roce://$HOST -p 7174 -S $S -V --timeout 60s" "listening"
	"$LAB" exec "timeout 120 rping -c -a $HOST -p 7174 -C $COUNT -V -S $S" >/tmp/rxe-host.log 2>&1
	rc=$?; host_rc || rc=1
	result "rping -c (rxe)  ->  goverbs ping -s roce://   -S $S -C $COUNT -V" $rc
done

guest_bg "rdma_server" 7471
"$LAB" host "$BIN/rdma_client -s roce://$GUEST -t 30s" >/tmp/rxe-host.log 2>&1
rc=$?; guest_rc || rc=1
result "goverbs rdma_client roce://  ->  rdma_server (rxe)" $rc
host_bg "$BIN/rdma_server -a roce://$HOST -t 60s" "rdma_server: start"
sleep 0.5 # the example prints before it listens
"$LAB" exec "timeout 120 rdma_client -s $HOST" >/tmp/rxe-host.log 2>&1
rc=$?; host_rc || rc=1
result "rdma_client (rxe)  ->  goverbs rdma_server roce://" $rc

for S in 100 1024; do
	guest_bg "udaddy -b $GUEST -C 10 -S $S" 7174
	"$LAB" host "$BIN/udaddy -s $GUEST -b $HOST -C 10 -S $S -t 30s" >/tmp/rxe-host.log 2>&1
	rc=$?; guest_rc || rc=1
	result "goverbs udaddy -s  ->  udaddy (rxe)   -C 10 -S $S" $rc
	host_bg "$BIN/udaddy -b $HOST -C 10 -S $S -t 60s" "starting server"
	sleep 0.5 # the example prints before it listens
	"$LAB" exec "timeout 120 udaddy -s $HOST -b $GUEST -C 10 -S $S" >/tmp/rxe-host.log 2>&1
	rc=$?; host_rc || rc=1
	result "udaddy -s (rxe)  ->  goverbs udaddy   -C 10 -S $S" $rc
done

PORT=18515
iters() { case $1 in *_lat) echo 1000 ;; *) echo 2000 ;; esac; }
for S in $PT_SIZES; do
	for T in $PT_TESTS; do
		s=$S
		[ "$T" = atomic_lat ] && s=8 # an atomic is 8 bytes
		[ "$T" = atomic_lat ] && [ "$S" != "$(echo $PT_SIZES | cut -d' ' -f1)" ] && continue
		N=$(iters "$T")
		# goverbs client -> perftest server (rxe)
		guest_bg "ib_$T -R -d rxe0 -s $s -n $N" $PORT
		"$LAB" host "timeout 90 $BIN/goverbs perf $T -R -B $HOST -s $s -n $N $GUEST" >/tmp/rxe-host.log 2>&1
		rc=$?
		grep -Eq "^ +$s +[0-9]+ " /tmp/rxe-host.log || rc=1
		guest_rc || rc=1
		result "goverbs perf $T -R roce  ->  ib_$T -R (rxe)   -s $s -n $N" $rc

		# perftest client (rxe) -> goverbs server
		host_bg "$BIN/goverbs perf $T -R --server -B $HOST -s $s -n $N" "waiting for a client"
		"$LAB" exec "rm -f /tmp/peer.log; timeout 90 ib_$T -R -d rxe0 -s $s -n $N $HOST > /tmp/peer.log 2>&1; echo rc=\$? >> /tmp/peer.log; cat /tmp/peer.log" >/tmp/rxe-host.log 2>&1
		rc=0
		grep -q '^rc=0' /tmp/rxe-host.log || rc=1
		grep -Eq "^ +$s +[0-9]+ " /tmp/rxe-host.log || rc=1
		host_rc || rc=1
		result "ib_$T -R (rxe)  ->  goverbs perf $T -R --server roce   -s $s -n $N" $rc
	done
done

[ "${KEEP:-0}" = 1 ] || "$LAB" stop >/dev/null 2>&1
echo "rxe interop: $pass passed, $fail failed, $(( $(date +%s) - start )) s"
[ "$fail" = 0 ]
