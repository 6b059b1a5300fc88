#!/usr/bin/env bash
# Instructions per request of a Go benchmark, by function, with callgrind:
# the benchmark runs N and 3N times and the difference of the two runs is
# divided by 2N, so that set-up and tear-down cancel. GOGC=off keeps a
# collection that falls in one run and not the other out of the totals.
# Costs are self costs, by the function that Go inlined them into (a line
# of the output names file:function), with callgrind's recursion marks
# ('2) folded into the function.
#
#   bench/callgrind.sh TESTBIN BENCH N [OUTDIR]
#
#   CGO_ENABLED=0 go test -c -o /tmp/shm.test ./provider/shm/
#   bench/callgrind.sh /tmp/shm.test 'RDMAWriteRate/size=8/list=1/td=1$' 96000
#   bench/callgrind.sh /tmp/shm.test 'SendRecvOneGoroutine$' 50000
#
# It prints the functions that cost at least one instruction a request,
# then "post path": the sum of those from verbs.QP.PostSend down to the
# transport's return (the engine's post functions, shm's direct senders,
# the request ring's producer), and the program's total.
#
# A benchmark pattern is matched level by level: 'X/list=1$' also runs
# X/list=1/td=1 (a sub-benchmark name with a slash is two levels).
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,22p' "$0"; exit 2; }
bin=$1 re=$2 n=$3
d=${4:-$(mktemp -d /tmp/callgrind.XXXXXX)}
mkdir -p "$d"
command -v valgrind >/dev/null || { echo "valgrind not found"; exit 1; }
for k in 1 3; do
	GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$d/out.$k" \
		"$bin" -test.run XXX -test.bench "$re" -test.benchtime $((n * k))x -test.cpu 1 >"$d/log.$k" 2>&1
	callgrind_annotate --auto=no --inclusive=no --threshold=100 "$d/out.$k" 2>/dev/null |
		awk '/^ *[0-9,]+ \( *[0-9.]+%\)/ {
			c = $1; gsub(",", "", c); l = $0
			sub(/^ *[0-9,]+ \( *[0-9.]+%\) +/, "", l); sub(/ \[.*\]$/, "", l); sub(/'"'"'[0-9]+$/, "", l)
			s[l] += c
		} END { for (l in s) print s[l] "\t" l }' >"$d/self.$k"
done
awk -F'\t' -v n="$n" '
	NR == FNR { a[$2] = $1; next }
	{ b[$2] = $1 }
	END {
		for (k in b) {
			d = (b[k] - a[k]) / (2 * n)
			if (d >= 1 || d <= -1) printf "%8.1f %s\n", d, k
			if (k ~ /verbs\.\(\*QP\)\.PostSend$|engine\.\(\*QP\)\.(PostSend|postOne|postSendOne|postRun)$|shm\.\(\*conn\)\.(OneSided|SendDirect|DirectEnd|DirectDone|expectAck|oneSidedSlow|OpenLane|live)$|Release64|ring\.\(\*Producer\)/)
				post += d
		}
		printf "post path: %.1f\n", post > "/dev/stderr"
	}' "$d/self.1" "$d/self.3" | sort -rn
echo "(outputs in $d)"
