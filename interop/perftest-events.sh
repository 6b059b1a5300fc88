#!/usr/bin/env bash
# goverbs perf -R -e against perftest -R -e (completion events instead of
# polling, on both ends) on siw (iWARP) and rxe (RoCEv2) in the VM of
# ../shared/vmlab (root needed; see its README).
#
#   interop/perftest-events.sh                     every case, both roles
#   DEVS=rxe0 TESTS="send_lat atomic_lat" SIZES=8 interop/perftest-events.sh
#   PORT=7580 interop/perftest-events.sh           another rdma_cm port
#
# goverbs runs on the host inside the lab's network namespace: over siw0
# as device iwarp0 from 10.77.0.1, over rxe0 as a RoCE device bound to
# 10.78.0.1 (-B); perftest runs in the guest (10.77.0.2 / 10.78.0.2).
# Each case runs in both roles, goverbs client against a perftest server
# and the other way round. perftest refuses -e for its WRITE tests
# ("Events feature not available on WRITE verb"): there only goverbs runs
# with -e. atomic_lat runs on rxe only (siw has no atomics). A case passes
# when both ends exit 0 and the client printed its result line.
#
# Known failures (2026-11-28, the lab's perftest 4.5+0.17-1): send_lat at
# 64 KiB over siw0, goverbs client against ib_send_lat -e, hangs in about
# half the runs (3 of 5); 8 B has not failed. On 2026-11-29 the other
# role (ib_send_lat -e client, goverbs server) failed too, as often, with
# the code of that day and with the day before's alike (alternating runs
# of both builds: old 5 of 10, new 7 of 12 failed in that role): the same
# loop, which both ends of perftest's send_lat run. It is
# perftest's: its latency loop waits on one completion channel for both
# CQs and polls the CQ it expects once per event, so a receive completion
# that comes before the send completion of its own previous reply puts it
# out of step for good (perftest split the channels upstream in 2023,
# commit 2209cf8, "Use separate completion channels for send and
# receive"). siw completes a SEND only after its last bytes went to TCP;
# in the emulated guest goverbs' next SEND, sent only once the whole reply
# had arrived (the capture shows it), is sometimes received and completed
# first. perftest then sleeps in read() on its channel, the SEND received
# and no event left to wake it. (The hang of send_lat over rxe0 in both
# roles was goverbs': its RoCE responder sent a polled application's reply
# before the ACK of the SEND it answered; fixed, and provider/roce's
# TestPeerACKPrecedesReply holds it.) send_lat at 64 KiB over rxe0,
# goverbs client against ib_send_lat -e, hung in about 1 run of 10 until
# goverbs' RoCE responder acknowledged the first packet of a long message
# too: rxe's requester (kernel 6.1) never stops its retransmission timer,
# which ran out every 2.1 s (the ACK timeout rdma_cm's REQ gives it) and,
# when one of perftest's 64 KiB replies was on its way, resent all of it
# (completer_retry_err grew by 0 to 6 per run); the reply's send
# completion then came after goverbs' next SEND had completed, perftest
# lost step as above, and its next send completion overflowed the send CQ
# (one entry: a kprobe on rxe_cq_post saw -EBUSY) and was lost with its
# event. The first packet's ACK puts rxe's timer off each message
# (provider/roce/acks.go): since, no resend while goverbs ran in 61 runs
# of this case, and one hang, without a resend or an overflow (cause not
# found; the run before it had left a hung perftest running in the guest,
# which this script now stops), against 4 hangs in 39 runs before; the
# other role passed 25 of 25 (one resend in all). perftest -e over rxe
# still hangs the same way wherever one of its send completions is late
# (a real loss, a real ACK timeout). The lab is shared: this script
# leaves it running, never stops or restarts it, and ends only the
# perftest process it started, by its id.
set -uo pipefail
cd "$(dirname "$0")/.."
LAB=${VMLAB:-../shared/vmlab/vmlab.sh}
[ -x "$LAB" ] || { echo "$0: no lab at $LAB: set VMLAB to the lab's vmlab.sh" >&2; exit 2; }
BIN=${BIN:-/tmp/goverbs-interop-events}
DEVS=${DEVS:-"siw0 rxe0"}
TESTS=${TESTS:-"send_lat write_lat read_lat atomic_lat send_bw write_bw read_bw"}
SIZES=${SIZES:-"8 65536"}
PORT=${PORT:-7581}
LOGS=${LOGS:-$BIN/logs}
export PATH="/usr/local/go/bin:$PATH"
mkdir -p "$BIN" "$LOGS"
go build -o "$BIN/goverbs" ./cmd/goverbs || exit 1
"$LAB" status >/dev/null 2>&1 && TIMEOUT=20 "$LAB" exec true >/dev/null 2>&1 ||
	{ echo "$0: the lab is not running: start it with $LAB start (it is shared: never restart it)" >&2; exit 2; }

start=$(date +%s)
pass=0; fail=0
result() { # name rc
	if [ "$2" = 0 ]; then echo "PASS $1"; pass=$((pass+1)); else
		echo "FAIL $1"; fail=$((fail+1))
		n=$(echo "$1" | tr -c 'A-Za-z0-9' _)
		{ echo "== host side"; cat "$BIN/host.log"; echo "== guest side"; "$LAB" exec "cat /tmp/pt-ev-$PORT.log" 2>&1; } > "$LOGS/$n.log" 2>&1
		echo "     (details in $LOGS/$n.log)"
	fi
}
iters() { case $1 in *_lat) echo 1000 ;; *) echo 2000 ;; esac; }
# ptev TEST: perftest's -e, which its WRITE tests refuse.
ptev() { case $1 in write_*) ;; *) printf '%s\n' -e ;; esac; }
# stop_guest: end the guest's perftest this script started, if it still runs.
stop_guest() { "$LAB" exec "[ -s /tmp/pt-ev-$PORT.pid ] && kill \$(cat /tmp/pt-ev-$PORT.pid) 2>/dev/null; rm -f /tmp/pt-ev-$PORT.pid; true" >/dev/null 2>&1; }

# free_roce: wait up to a minute for UDP port 4791 of the host's rxe-side
# address, which one process at a time holds (others share the lab).
free_roce() {
	"$LAB" host "for i in \$(seq 600); do ss -lun | grep -q '10.78.0.1:4791 ' || exit 0; sleep 0.1; done; exit 1" >/dev/null ||
		echo "     (UDP 10.78.0.1:4791 is still held by another process)"
}

for D in $DEVS; do
	case $D in
	siw0) HOST=10.77.0.1 GUEST=10.77.0.2 GV="-d iwarp0" ;;
	rxe0) HOST=10.78.0.1 GUEST=10.78.0.2 GV="-B 10.78.0.1" ;;
	*) echo "$0: device $D: siw0 or rxe0" >&2; exit 2 ;;
	esac
	for S in $SIZES; do
		for T in $TESTS; do
			[ "$T" = atomic_lat ] && [ "$D" != rxe0 ] && continue
			[ "$T" = atomic_lat ] && [ "$S" != 8 ] && continue # perftest's atomics are 8 bytes
			N=$(iters "$T"); E=$(ptev "$T")
			[ "$D" = rxe0 ] && free_roce
			# goverbs client -> perftest server
			# (the pid is timeout's, which passes a kill on to perftest)
			"$LAB" exec "rm -f /tmp/pt-ev-$PORT.log; (timeout 90 ib_$T -R $E -d $D -p $PORT -s $S -n $N > /tmp/pt-ev-$PORT.log 2>&1 & echo \$! > /tmp/pt-ev-$PORT.pid; wait \$!; echo rc=\$? >> /tmp/pt-ev-$PORT.log) >/dev/null 2>&1 &" >/dev/null
			"$LAB" exec "for i in \$(seq 150); do ss -ltn | grep -q ':$PORT ' && exit 0; sleep 0.1; done; exit 1" >/dev/null
			"$LAB" host "timeout 90 $BIN/goverbs perf $T -R -e $GV -p $PORT -s $S -n $N $GUEST" >"$BIN/host.log" 2>&1
			rc=$?
			grep -Eq "^ +$S +[0-9]+ " "$BIN/host.log" || rc=1
			"$LAB" exec "for i in \$(seq 150); do grep -q '^rc=' /tmp/pt-ev-$PORT.log 2>/dev/null && break; sleep 0.1; done; cat /tmp/pt-ev-$PORT.log" | grep -q '^rc=0' || rc=1
			stop_guest
			result "goverbs perf $T -R -e  ->  ib_$T -R $E ($D)   -s $S -n $N" $rc

			[ "$D" = rxe0 ] && free_roce
			# perftest client -> goverbs server
			"$LAB" host "rm -f $BIN/srv.log; (timeout 90 $BIN/goverbs perf $T -R -e --server $GV -p $PORT -s $S -n $N > $BIN/srv.log 2>&1; echo rc=\$? >> $BIN/srv.log) &" >/dev/null
			"$LAB" host "for i in \$(seq 100); do grep -q 'waiting for a client' $BIN/srv.log 2>/dev/null && exit 0; sleep 0.05; done; exit 1" >/dev/null
			"$LAB" exec "rm -f /tmp/pt-ev-$PORT.log; timeout 90 ib_$T -R $E -d $D -p $PORT -s $S -n $N $HOST > /tmp/pt-ev-$PORT.log 2>&1; echo rc=\$? >> /tmp/pt-ev-$PORT.log; cat /tmp/pt-ev-$PORT.log" >"$BIN/host.log" 2>&1
			rc=0
			grep -q '^rc=0' "$BIN/host.log" || rc=1
			grep -Eq "^ +$S +[0-9]+ " "$BIN/host.log" || rc=1
			for i in $(seq 150); do grep -q '^rc=' "$BIN/srv.log" 2>/dev/null && break; sleep 0.1; done
			grep -q '^rc=0' "$BIN/srv.log" || rc=1
			cat "$BIN/srv.log" >> "$BIN/host.log"
			result "ib_$T -R $E ($D)  ->  goverbs perf $T -R -e --server   -s $S -n $N" $rc
		done
	done
done

echo "perftest -R -e interop: $pass passed, $fail failed, $(( $(date +%s) - start )) s"
[ "$fail" = 0 ]
