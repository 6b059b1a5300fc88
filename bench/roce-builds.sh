#!/usr/bin/env bash
# 1 MiB RDMA WRITE bandwidth of several goverbs builds over RoCE (device
# roce, two processes on 127.0.0.1 and 127.0.0.2) against iwarp0 of the
# first build, in interleaved rounds whose order rotates; the summary gives
# each build's median and the medians of its per-round ratios to iwarp0
# and to the first build. To measure a change, build the old tree and the
# new one into two binaries:
#
#   git worktree add --detach /tmp/old main && (cd /tmp/old && go build -o /tmp/goverbs.old ./cmd/goverbs)
#   go build -o /tmp/goverbs.new ./cmd/goverbs
#   ROUNDS=8 bench/roce-builds.sh old=/tmp/goverbs.old new=/tmp/goverbs.new
#
# N (1000) is the iterations of a run; OUT (a new /tmp directory) gets raw.tsv.
set -uo pipefail
ROUNDS=${ROUNDS:-7}; N=${N:-1000}; OUT=${OUT:-$(mktemp -d /tmp/goverbs-roce-builds.XXXXXX)}
PORT=${PORT:-18791}
[ $# -ge 1 ] || { echo "usage: $0 NAME=BINARY..." >&2; exit 2; }
declare -A bin; names=()
for a in "$@"; do names+=("${a%%=*}"); bin[${a%%=*}]=${a#*=}; done
mkdir -p "$OUT"; : > "$OUT/raw.tsv"
one() { # round label binary
	local d=(--bind 127.0.0.1) c=(--bind 127.0.0.2 127.0.0.1)
	if [ "$2" = iwarp0 ]; then d=(-d iwarp0); c=(-d iwarp0 127.0.0.1); fi
	"$3" perf write_bw -s 1048576 -n "$N" "${d[@]}" --server -p "$PORT" >/dev/null 2>"$OUT/server.err" &
	local s=$!
	for i in $(seq 50); do grep -q waiting "$OUT/server.err" 2>/dev/null && break; sleep 0.05; done
	local v
	v=$(timeout 300 "$3" perf write_bw -s 1048576 -n "$N" "${c[@]}" -p "$PORT" --json |
		python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["bw_avg_mb_s"])')
	wait $s
	[ -n "$v" ] && printf '%s\t%s\t%s\n' "$1" "$2" "$v" >> "$OUT/raw.tsv"
}
list=(iwarp0 "${names[@]}")
for r in $(seq "$ROUNDS"); do
	echo "round $r/$ROUNDS $(date -u +%T)" >&2
	k=$(( (r - 1) % ${#list[@]} ))
	for j in $(seq 0 $(( ${#list[@]} - 1 ))); do
		l=${list[$(( (k + j) % ${#list[@]} ))]}
		if [ "$l" = iwarp0 ]; then one "$r" iwarp0 "${bin[${names[0]}]}"; else one "$r" "$l" "${bin[$l]}"; fi
	done
done
python3 - "$OUT/raw.tsv" "${names[0]}" <<'PY'
import sys, statistics as st, collections
d = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r, l, v = line.rstrip("\n").split("\t"); d[l][r] = float(v)
first = sys.argv[2]
rs = sorted(d["iwarp0"], key=int)
print(f"{len(rs)} rounds, interleaved; 1 MiB write_bw, MB/s: median, and medians of per-round ratios")
for l in d:
    v = [d[l][r] for r in rs if r in d[l]]
    line = f"{l:8s} median {st.median(v):7.0f}  /iwarp0 {st.median([d[l][r] / d['iwarp0'][r] for r in rs if r in d[l]]):.2f}"
    if l not in ("iwarp0", first):
        line += f"  /{first} {st.median([d[l][r] / d[first][r] for r in rs if r in d[l] and r in d[first]]):.2f}"
    print(line, "  rounds:", " ".join(f"{x:.0f}" for x in v))
PY
echo "raw: $OUT/raw.tsv"
