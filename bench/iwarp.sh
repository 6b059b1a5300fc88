#!/usr/bin/env bash
# goverbs iWARP over loopback against the baselines of ../shared/bench, in one
# run: libfabric's tcp provider (fi_pingpong), Go TCP (busy-polled and
# netpoller) and a single loopback TCP stream. Needs libfabric-bin.
#   bench/iwarp.sh            (about a minute)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
SB=${SHARED_BENCH:-../shared/bench}
OUT=$(mktemp -d)
command -v fi_pingpong >/dev/null || { apt-get install -y libfabric-bin >/dev/null 2>&1 || true; }
(cd "$SB/src/gospin" && go build -o "$OUT/gospin" .) && (cd "$SB/src/gotcp" && go build -o "$OUT/gotcp" .)

fipp() { # size iters
	FI_TCP_IFACE=lo fi_pingpong -p tcp -e msg -d lo -S "$1" -I "$2" -B 47610 >/dev/null 2>&1 &
	sleep 0.7
	FI_TCP_IFACE=lo fi_pingpong -p tcp -e msg -d lo -S "$1" -I "$2" -P 47610 127.0.0.1 2>&1 | awk 'NR==2'
	wait
}
echo "== libfabric tcp (fi_pingpong: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec)"
for i in 1 2 3; do fipp 8 20000; done
for i in 1 2 3; do fipp 1048576 300; done
echo "== Go TCP busy-polled raw fd (gospin)"
("$OUT/gospin" server &) ; sleep 0.3; "$OUT/gospin" client | tail -1
echo "== Go TCP netpoller ping-pong and single stream (gotcp)"
"$OUT/gotcp" pingpong 20000 | tail -1
"$OUT/gotcp" stream 3 | tail -1
echo "== goverbs iwarp (go test -bench)"
go test ./provider/iwarp/ -run XXX -bench 'SendRecvPingPong|RDMAWrite' -benchtime 3s -count 3 2>&1 | grep -E '^Benchmark'
rm -rf "$OUT"
