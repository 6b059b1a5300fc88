#!/usr/bin/env bash
# bench/blocking.sh — a blocking ping-pong between two processes: goverbs
# (rdmacm's GetSendComp/GetRecvComp) against the kernel's sockets.
#
#   bench/blocking.sh                               # ROUNDS=3, BENCHTIME=0.5s
#   GOVERBS_BASE=/path/to/old/goverbs bench/blocking.sh   # and that tree's, same run
#   ROUNDS=5 OUT=/tmp/b bench/blocking.sh
#
# Rows (bench/blocking): shm against a Unix stream socket, iWARP against
# loopback TCP, RoCE against loopback UDP, at 8 B, 4 KiB and 64 KiB (UDP:
# 65507 B, its largest datagram); goverbs with every wait sleeping at once
# (spin off) and with the default adaptive spin. The client is this
# process, the server the test binary run again. Every round runs every
# row of every binary back to back (interleaved); each cell is the median
# of the rounds, each ratio is between medians of this run (goverbs over
# the kernel's socket of the same binary's run). With GOVERBS_BASE, that
# tree gets a copy of bench/blocking and is measured beside this one.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
BENCHTIME=${BENCHTIME:-0.5s}
OUT=${OUT:-$(mktemp -d /tmp/blocking-bench.XXXXXX)}
mkdir -p "$OUT"
go test -c -o "$OUT/new.test" ./bench/blocking
bins=(new)
if [ -n "${GOVERBS_BASE:-}" ]; then
	mkdir -p "$GOVERBS_BASE/bench/blocking"
	cp bench/blocking/bench_test.go "$GOVERBS_BASE/bench/blocking/"
	(cd "$GOVERBS_BASE" && go test -c -o "$OUT/old.test" ./bench/blocking)
	bins=(old new)
fi
raw="$OUT/raw.tsv"
: >"$raw"
for r in $(seq "$ROUNDS"); do
	echo "round $r/$ROUNDS" >&2
	for size in 8 4096 65536; do
		for pair in "shm unix" "iwarp tcp" "roce udp"; do
			for b in "${bins[@]}"; do
				for tr in $pair; do
					(cd bench/blocking && "$OUT/$b.test" -test.run '^$' -test.bench "^BenchmarkPingPong\$/^$tr\$/^$size\$/" \
						-test.benchtime "$BENCHTIME" 2>/dev/null) |
						awk -v r="$r" -v b="$b" '/^Benchmark/ {n=$1; sub(/-[0-9]+$/, "", n); print r "\t" b "\t" n "\t" $3}' >>"$raw"
				done
			done
		done
	done
done
python3 - "$raw" >"$OUT/table.md" <<'PY'
import sys, statistics, collections
cells = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r, b, name, ns = line.split("\t")
    _, tr, size, spin = name.split("/")
    cells[(b, tr, int(size), spin)].append(float(ns))
med = {k: statistics.median(v) for k, v in cells.items()}
peer = {"shm": "unix", "iwarp": "tcp", "roce": "udp"}
bins = sorted({k[0] for k in med}, key=lambda b: b != "old")
hdr = "| size | goverbs | spin | " + " | ".join(f"{b} µs | {b} socket µs | {b} ratio" for b in bins) + " |"
print(hdr)
print("|" + "---|" * (3 + 3 * len(bins)))
for size in (8, 4096, 65536):
    for tr in ("shm", "iwarp", "roce"):
        for spin in ("off", "adaptive"):
            row = [f"{size} B" if size < 1024 else f"{size // 1024} KiB", f"{tr} vs {peer[tr]}", spin]
            for b in bins:
                g, k = med.get((b, tr, size, spin)), med.get((b, peer[tr], size, "-"))
                row += [f"{g / 1e3:.1f}" if g else "-", f"{k / 1e3:.1f}" if k else "-", f"{g / k:.2f}x" if g and k else "-"]
            print("| " + " | ".join(row) + " |")
PY
cat "$OUT/table.md"
echo "raw: $raw" >&2
