#!/usr/bin/env bash
# goverbs perf -R against perftest (ib_send_bw, ib_write_bw, ib_read_bw,
# ib_send_lat, ib_write_lat, ib_read_lat with -R) on the Linux SoftiWARP
# driver (siw), in the VM of ../shared/vmlab (root needed; see its README).
#
#   interop/perftest.sh             every test, both roles, at each of $SIZES
#                                   (24 cases: 3 to 5 minutes, VM start included)
#   TESTS="send_bw read_lat" SIZES=4096 interop/perftest.sh
#   QPS=2 TESTS="send_bw write_bw read_bw" interop/perftest.sh   bandwidth over 2 QPs (-q)
#   PORT=7580 interop/perftest.sh   another rdma_cm port
#   CASE_TIMEOUT=300 interop/perftest.sh   seconds each end of a case may take (120)
#
# goverbs runs on the host inside the lab's network namespace (10.77.0.1),
# perftest in the guest (10.77.0.2, device siw0). Each case runs in both
# roles: the goverbs client against a perftest server, and the perftest
# client against a goverbs server. A case passes when both ends exit 0 and
# the client printed its result line. One line per case, then a summary and
# the time taken; the exit status is non-zero if any case failed.
# The lab is shared: this script leaves it running (it starts it if it is
# not), and ends only the perftest process it started, by its id.
# Known failures (2026-11-28): none. send_lat at 64 KiB once failed here by
# timing out at 60 s while the messages still flowed (the guest is
# emulated, the host was busy): each end now has CASE_TIMEOUT, 120 s.
# atomic_lat is not in the matrix: siw has no atomics (atomic_cap 0).
# ib_atomic_lat -R fails even between two perftest instances on siw0 (the
# client's first post fails, "Couldn't post send: scnt=1": libsiw refuses
# the atomic opcode), and goverbs perf -R refuses atomic_lat.
set -uo pipefail
cd "$(dirname "$0")/.."
LAB=${VMLAB:-../shared/vmlab/vmlab.sh}
[ -x "$LAB" ] || { echo "$0: no lab at $LAB: set VMLAB to the lab's vmlab.sh (see README.md, the interop scripts)" >&2; exit 2; }
BIN=${BIN:-/tmp/goverbs-interop}
LOGS=${LOGS:-$BIN/logs}
TESTS=${TESTS:-"send_bw write_bw read_bw send_lat write_lat read_lat"}
SIZES=${SIZES:-"8 65536"}
QPS=${QPS:-1}
PORT=${PORT:-18515}
CT=${CASE_TIMEOUT:-120} # s, each end of a case: 1000 round trips of 64 KiB took 35-60 s in the emulated guest of a busy host
export PATH="/usr/local/go/bin:$PATH"
mkdir -p "$BIN"
go build -o "$BIN/goverbs" ./cmd/goverbs || exit 1

start=$(date +%s)
TIMEOUT=20 "$LAB" exec true >/dev/null 2>&1 || { "$LAB" status | grep -q '^qemu running' || "$LAB" start >/dev/null 2>&1; } || exit 1

pass=0; fail=0
mkdir -p "$LOGS"
G=/tmp/pt-$PORT # the guest's files of this run
result() { # name rc
	if [ "$2" = 0 ]; then echo "PASS $1"; pass=$((pass+1)); else
		echo "FAIL $1"; fail=$((fail+1))
		n=$(echo "$1" | tr -c 'A-Za-z0-9' _)
		{ echo "== host side"; cat "$BIN/host.log"; echo "== guest side"; "$LAB" exec "cat $G.log" 2>&1; } > "$LOGS/$n.log" 2>&1
		echo "     (details in $LOGS/$n.log)"
	fi
}
iters() { case $1 in *_lat) echo 1000 ;; *) echo 2000 ;; esac; }
qflag() { case $1 in *_bw) echo "-q $QPS" ;; esac; }

for S in $SIZES; do
	for T in $TESTS; do
		N="$(iters "$T") $(qflag "$T")"
		N=${N% }
		# goverbs client -> perftest server (siw)
		"$LAB" exec "rm -f $G.log; (timeout $CT ib_$T -R -d siw0 -p $PORT -s $S -n $N > $G.log 2>&1; echo rc=\$? >> $G.log) & echo \$! > $G.pid" >/dev/null
		"$LAB" exec "for i in \$(seq 100); do ss -ltn | grep -q ':$PORT ' && exit 0; sleep 0.1; done; exit 1" >/dev/null
		"$LAB" host "timeout $CT $BIN/goverbs perf $T -R -p $PORT -s $S -n $N 10.77.0.2" >"$BIN/host.log" 2>&1
		rc=$?
		grep -Eq "^ +$S +[0-9]+ " "$BIN/host.log" || rc=1
		"$LAB" exec "for i in \$(seq 100); do grep -q '^rc=' $G.log 2>/dev/null && break; sleep 0.1; done; cat $G.log" | grep -q '^rc=0' || rc=1
		"$LAB" exec "[ -s $G.pid ] && kill \$(cat $G.pid) 2>/dev/null; rm -f $G.pid; true" >/dev/null 2>&1
		result "goverbs perf $T -R  ->  ib_$T -R (siw)   -s $S -n $N" $rc

		# perftest client (siw) -> goverbs server
		rm -f "$BIN/srv.log"
		"$LAB" host "(timeout $CT $BIN/goverbs perf $T -R --server -p $PORT -s $S -n $N > $BIN/srv.log 2>&1; echo rc=\$? >> $BIN/srv.log) &" >/dev/null
		"$LAB" host "for i in \$(seq 100); do ss -ltn | grep -q ':$PORT ' && exit 0; sleep 0.05; done; exit 1" >/dev/null
		TIMEOUT=$((CT + 30)) "$LAB" exec "rm -f $G.log; timeout $CT ib_$T -R -d siw0 -p $PORT -s $S -n $N 10.77.0.1 > $G.log 2>&1; echo rc=\$? >> $G.log; cat $G.log" >"$BIN/host.log" 2>&1
		rc=0
		grep -q '^rc=0' "$BIN/host.log" || rc=1
		grep -Eq "^ +$S +[0-9]+ " "$BIN/host.log" || rc=1
		for i in $(seq 100); do grep -q '^rc=' "$BIN/srv.log" 2>/dev/null && break; sleep 0.1; done
		grep -q '^rc=0' "$BIN/srv.log" || rc=1
		cat "$BIN/srv.log" >> "$BIN/host.log"
		result "ib_$T -R (siw)  ->  goverbs perf $T -R --server   -s $S -n $N" $rc
	done
done

echo "perftest -R interop with siw: $pass passed, $fail failed, $(( $(date +%s) - start )) s"
[ "$fail" = 0 ]
