#!/usr/bin/env bash
# goverbs iWARP over loopback against the baselines of ../shared/bench, in one
# run: libfabric's tcp provider (fi_pingpong), Go TCP (busy-polled and
# netpoller) and a single loopback TCP stream. The machine's speed drifts
# from minute to minute, so each goverbs measurement is taken right after the
# baseline it is compared with, ROUNDS times. Needs libfabric-bin.
#   bench/iwarp.sh            (about two minutes)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
SB=${SHARED_BENCH:-../shared/bench}
ROUNDS=${ROUNDS:-3}
OUT=$(mktemp -d)
command -v fi_pingpong >/dev/null || { apt-get install -y libfabric-bin >/dev/null 2>&1 || true; }
(cd "$SB/src/gospin" && go build -o "$OUT/gospin" .) && (cd "$SB/src/gotcp" && go build -o "$OUT/gotcp" .)
go test -c -o "$OUT/iwarp.test" ./provider/iwarp/ || exit 1

fipp() { # size iters -> usec/xfer and MB/s
	FI_TCP_IFACE=lo fi_pingpong -p tcp -e msg -d lo -S "$1" -I "$2" -B 47610 >/dev/null 2>&1 &
	sleep 0.7
	FI_TCP_IFACE=lo fi_pingpong -p tcp -e msg -d lo -S "$1" -I "$2" -P 47610 127.0.0.1 2>&1 | awk 'NR==2{print $7 " us/xfer, " $6 " MB/s"}'
	wait
}
bench() { "$OUT/iwarp.test" -test.run XXX -test.bench "$1" -test.benchtime 2s 2>&1 | grep '^Benchmark' | sed 's/  */ /g'; }

for r in $(seq "$ROUNDS"); do
	echo "== round $r: 8-byte latency (one-way)"
	echo "libfabric tcp:   $(fipp 8 20000)"
	("$OUT/gospin" server &); sleep 0.3
	echo "Go busy-poll:    $("$OUT/gospin" client | tail -1)"
	echo "goverbs iwarp:   $(bench SendRecvPingPong)"
	echo "== round $r: 1 MiB bandwidth"
	echo "libfabric tcp:   $(fipp 1048576 300)"
	echo "TCP stream:      $("$OUT/gotcp" stream 2 | tail -1)"
	echo "goverbs iwarp:   $(bench 'RDMAWrite/size=1048576')"
done
rm -rf "$OUT"
