#!/usr/bin/env bash
# shm-lat-pairs.sh [ROUNDS]: one-way 8-byte latency over shared memory,
# UCX and goverbs alternated so that each goverbs figure has a UCX figure
# taken seconds before it (the machine drifts between a fast and a slow mode
# from minute to minute). Each round runs UCX posix tag_lat (two processes),
# then goverbs perf send_lat -d shm0 in one process, in two processes, and in
# two processes with GOMAXPROCS=1 each, with 10000 warm-up iterations, and
# prints one line: the p50 and mean of each, in microseconds.
#
#   bench/shm-lat-pairs.sh 24 | tee pairs.txt
#   python3 bench/shm-lat-pairs-summary.py pairs.txt
#
# Needs ucx_perftest (Debian's ucx-utils) and Go; GOVERBS_BIN, when set,
# names a goverbs binary to use instead of building one.
set -uo pipefail
cd "$(dirname "$0")/.."
R=${1:-6}
command -v ucx_perftest >/dev/null || { echo "shm-lat-pairs.sh: needs ucx_perftest (Debian's ucx-utils)" >&2; exit 1; }
BIN=${GOVERBS_BIN:-}
if [ -z "$BIN" ]; then
	BIN=$(mktemp -d)/goverbs
	go build -o "$BIN" ./cmd/goverbs || exit 1
fi
# typical (p50) and mean of a goverbs -json result line
gv() { sed -n 's/.*"t_typical_us":\([0-9.]*\).*"t_avg_us":\([0-9.]*\).*/\1 \2/p'; }
perf() { "$BIN" perf send_lat -d shm0 -s 8 -n 100000 -w 10000 --json "$@"; }
echo "# $(date -u +%FT%TZ) $(nproc) CPUs, $R pairs: UCX posix tag_lat (2 processes, -n 200000 -w 10000) alternated with goverbs perf send_lat -d shm0 (-n 100000 -w 10000)"
echo "# in one process (gv1), two processes (gv2), two processes with GOMAXPROCS=1 each (gv2p1); 8 B, p50 and mean one-way in us."
echo "# ucx_p50 ucx_mean | gv1_p50 gv1_mean | gv2_p50 gv2_mean | gv2p1_p50 gv2p1_mean (GOMAXPROCS=1)"
for _ in $(seq "$R"); do
	port=$((20000 + RANDOM % 20000))
	UCX_TLS=posix,self ucx_perftest -p $port -w 10000 -n 200000 -f >/dev/null 2>&1 &
	sp=$!
	sleep 0.4
	u=$(UCX_TLS=posix,self ucx_perftest -p $port -t tag_lat -s 8 -n 200000 -w 10000 -f localhost 2>/dev/null | awk 'NF==8 && $1 ~ /^[0-9]+$/ {print $2, $4}')
	wait $sp 2>/dev/null
	g=$(perf | gv)
	port=$((20000 + RANDOM % 20000))
	perf --server -p $port >/dev/null 2>&1 &
	sp=$!
	sleep 0.3
	g2=$(perf -p $port localhost | gv)
	wait $sp
	port=$((20000 + RANDOM % 20000))
	GOMAXPROCS=1 perf --server -p $port >/dev/null 2>&1 &
	sp=$!
	sleep 0.3
	g3=$(GOMAXPROCS=1 perf -p $port localhost | gv)
	wait $sp
	echo "$u | $g | $g2 | $g3"
done
