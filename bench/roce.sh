#!/usr/bin/env bash
# RoCEv2 in userspace (device roce, provider/roce) against iWARP over TCP
# (iwarp0) and a raw TCP stream (iperf3), on loopback, two processes each:
#
#   8 B SEND/RECV one-way latency   goverbs perf send_lat -s 8   roce vs iwarp0
#   1 MiB RDMA WRITE bandwidth      goverbs perf write_bw -s 1048576
#                                   roce vs iwarp0 vs iperf3 -l 1M (one stream)
#
# RoCE's server and client use two loopback addresses (port 4791 of an
# address is one process's): --server --bind 127.0.0.1 and --bind 127.0.0.2.
# The machine's speed drifts, so every round runs each measurement once, in
# turn, and the summary gives the median of each and the median of the
# per-round ratios.
#
# GOVERBS_BASE=/path/to/goverbs adds an older build's roce write_bw to
# every round (before or after this tree's, alternating): the summary then
# gives its median and the per-round ratios roce/base and base/iwarp0.
#
#   bench/roce.sh                 (ROUNDS=7: about three minutes)
#   ROUNDS=11 OUT=/tmp/r bench/roce.sh
#   GOVERBS_BASE=/tmp/goverbs.base ROUNDS=7 bench/roce.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
ROUNDS=${ROUNDS:-7}
GOVERBS_BASE=${GOVERBS_BASE:-}
OUT=${OUT:-$(mktemp -d /tmp/goverbs-roce.XXXXXX)}
mkdir -p "$OUT"
command -v iperf3 >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q iperf3 >/dev/null || exit 1
go build -o "$OUT/goverbs" ./cmd/goverbs || exit 1
G="$OUT/goverbs"
PORT=18777

# run NAME SERVER-ARGS -- CLIENT-ARGS: one goverbs measurement, its JSON line
# appended to $OUT/NAME.json.
run() {
	local name=$1 g=$G; shift
	if [ "$name" = base_bw ]; then g=$GOVERBS_BASE; fi
	local sargs=() cargs=()
	while [ "$1" != "--" ]; do sargs+=("$1"); shift; done; shift
	cargs=("$@")
	"$g" perf "${sargs[@]}" --server -p $PORT >/dev/null 2>"$OUT/server.err" &
	local s=$!
	for i in $(seq 50); do grep -q waiting "$OUT/server.err" 2>/dev/null && break; sleep 0.05; done
	# A client that fails (it found no server in time) leaves the server
	# waiting for ever: stop it.
	"$g" perf "${cargs[@]}" -p $PORT --json >>"$OUT/$name.json" || { echo "FAIL $name" >&2; kill $s 2>/dev/null; }
	wait $s
}

for r in $(seq "$ROUNDS"); do
	echo "round $r/$ROUNDS" >&2
	run iwarp_lat send_lat -s 8 -n 20000 -d iwarp0 -- send_lat -s 8 -n 20000 -d iwarp0 127.0.0.1
	run roce_lat send_lat -s 8 -n 20000 --bind 127.0.0.1 -- send_lat -s 8 -n 20000 --bind 127.0.0.2 127.0.0.1
	run iwarp_bw write_bw -s 1048576 -n 2000 -d iwarp0 -- write_bw -s 1048576 -n 2000 -d iwarp0 127.0.0.1
	if [ -n "$GOVERBS_BASE" ] && [ $((r % 2)) = 0 ]; then
		run base_bw write_bw -s 1048576 -n 2000 --bind 127.0.0.1 -- write_bw -s 1048576 -n 2000 --bind 127.0.0.2 127.0.0.1
	fi
	run roce_bw write_bw -s 1048576 -n 2000 --bind 127.0.0.1 -- write_bw -s 1048576 -n 2000 --bind 127.0.0.2 127.0.0.1
	if [ -n "$GOVERBS_BASE" ] && [ $((r % 2)) = 1 ]; then
		run base_bw write_bw -s 1048576 -n 2000 --bind 127.0.0.1 -- write_bw -s 1048576 -n 2000 --bind 127.0.0.2 127.0.0.1
	fi
	iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
	sleep 0.3
	iperf3 -c 127.0.0.1 -p 5299 -l 1M -t 3 -J >"$OUT/iperf.$r.json" 2>/dev/null
	wait
done

python3 - "$OUT" "$ROUNDS" <<'PY'
import json, sys, os, statistics as st, glob
out, rounds = sys.argv[1], int(sys.argv[2])
def col(name, key):
    return [json.loads(l)[key] for l in open(f"{out}/{name}.json")]
lat = {k: col(f"{k}_lat", "t_typical_us") for k in ("iwarp", "roce")}
bw = {k: col(f"{k}_bw", "bw_avg_mb_s") for k in ("iwarp", "roce")}
bw["iperf3"] = [json.load(open(f))["end"]["sum_received"]["bits_per_second"] / 8e6
                for f in sorted(glob.glob(f"{out}/iperf.*.json"))]
n = min(len(v) for v in list(lat.values()) + list(bw.values()))
med = lambda v: st.median(v[:n])
ratio = lambda a, b: st.median([x / y for x, y in zip(a[:n], b[:n])])
print(f"{n} rounds, interleaved; medians")
print(f"8 B send_lat one-way t_typical [us]: roce {med(lat['roce']):.2f}  iwarp0 {med(lat['iwarp']):.2f}"
      f"  ratio roce/iwarp0 {ratio(lat['roce'], lat['iwarp']):.2f}")
print(f"1 MiB write_bw [MB/s]: roce {med(bw['roce']):.0f}  iwarp0 {med(bw['iwarp']):.0f}  iperf3 {med(bw['iperf3']):.0f}"
      f"  ratio roce/iwarp0 {ratio(bw['roce'], bw['iwarp']):.2f}  roce/iperf3 {ratio(bw['roce'], bw['iperf3']):.2f}")
if os.path.exists(f"{out}/base_bw.json"):
    base = col("base_bw", "bw_avg_mb_s")
    m = min(n, len(base))
    print(f"base build 1 MiB write_bw [MB/s]: {st.median(base[:m]):.0f}  ratio roce/base {ratio(bw['roce'][:m], base[:m]):.2f}"
          f"  base/iwarp0 {ratio(base[:m], bw['iwarp'][:m]):.2f}")
PY
