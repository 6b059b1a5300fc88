#!/usr/bin/env bash
# tcp-floor.sh [ROUNDS]: one-way 8-byte latency over loopback TCP, every
# end busy-polling, against the kernel's own floor, in the same rounds:
# C's TCP ping-pong spinning on MSG_DONTWAIT recv (../shared/bench's
# tcp_pingpong.c), Go's raw-fd spin (its gospin: non-blocking read/write on
# the socket's descriptor), goverbs perf send_lat -d iwarp0 (two processes'
# worth of work in one: the iWARP wire over loopback TCP) and UCX tcp
# tag_lat (two processes). Prints one line per round and the medians.
#
#   bench/tcp-floor.sh 5 | tee floor.txt
#
# Needs gcc, ucx_perftest (Debian's ucx-utils), Go, and SHARED_BENCH
# (default ../shared/bench) for the two floor programs' sources.
set -uo pipefail
cd "$(dirname "$0")/.."
R=${1:-5}
SB=${SHARED_BENCH:-../shared/bench}
for f in "$SB/src/tcp_pingpong.c" "$SB/src/gospin/main.go"; do
	[ -f "$f" ] || { echo "tcp-floor.sh: $f missing (SHARED_BENCH)" >&2; exit 1; }
done
command -v ucx_perftest >/dev/null || { echo "tcp-floor.sh: needs ucx_perftest (Debian's ucx-utils)" >&2; exit 1; }
T=$(mktemp -d)
gcc -O2 -o "$T/tcp_pp" "$SB/src/tcp_pingpong.c" || exit 1
(cd "$SB/src/gospin" && go build -o "$T/gospin" .) || exit 1
go build -o "$T/goverbs" ./cmd/goverbs || exit 1
P=${UCX_PORT:-13411}
echo "# $(date -u +%FT%TZ) $(nproc) CPUs, $R rounds; one-way p50 in us: C spin | Go raw-fd spin | goverbs iwarp0 | UCX tcp"
for r in $(seq "$R"); do
	c=$("$T/tcp_pp" spin 200000 8 | sed -n 's/.*median_rtt_us=\([0-9.]*\).*/\1/p' | awk '{print $1/2}')
	("$T/gospin" server >/dev/null 2>&1 &)
	sleep 0.3
	g=$("$T/gospin" client 2>&1 | sed -n 's/.*one-way p50=\([0-9.]*\)µs.*/\1/p')
	sleep 0.2
	v=$("$T/goverbs" perf send_lat -d iwarp0 -s 8 -n 100000 -w 10000 -json | sed -n 's/.*"t_typical_us":\([0-9.]*\).*/\1/p')
	(UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 60 ucx_perftest -t tag_lat -s 8 -n 100000 -w 10000 -p "$P" -f >/dev/null 2>&1 &)
	sleep 0.6
	u=$(UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 60 ucx_perftest 127.0.0.1 -t tag_lat -s 8 -n 100000 -w 10000 -p "$P" -f 2>&1 | awk 'NF==8 && $1 ~ /^[0-9]+$/ {p=$2} END{print p}')
	sleep 0.3
	echo "$r $c $g $v $u"
done | tee "$T/rows"
python3 - "$T/rows" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 5]
cols = list(zip(*rows))
med = [statistics.median(float(x) for x in c) for c in cols[1:]]
print("# medians: C spin %.2f | Go raw-fd %.2f | goverbs iwarp0 %.2f | UCX tcp %.2f" % tuple(med))
print("# iwarp0 / C floor %.2fx, / Go raw-fd %.2fx, / UCX tcp %.2fx; 0.8x UCX tcp = %.2f us, C floor / UCX tcp %.2fx"
      % (med[2] / med[0], med[2] / med[1], med[2] / med[3], 0.8 * med[3], med[0] / med[3]))
PY
rm -rf "$T"
