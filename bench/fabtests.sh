#!/usr/bin/env bash
# Same-run comparison of 1 MiB streaming bandwidth over loopback TCP:
# libfabric fabtests (tcp provider, FI_EP_MSG) vs goverbs iWARP (iwarp0) vs iperf3.
# All figures are MB/s with MB = 10^6 bytes (fabtests' "MB/sec" is bytes/usec).
#
# Needs: fabtests built against the system libfabric (FABTESTS=.../fabtests/benchmarks),
#        iperf3, jq, ss, Go, a goverbs checkout (GOVERBS_SRC). Debian ships no
#        fabtests; they build from libfabric's source of the installed version:
#          apt-get install -y libfabric-dev build-essential autoconf automake libtool pkg-config jq
#          git clone --depth 1 -b v1.17.0 https://github.com/ofiwg/libfabric   # fi_info --version
#          cd libfabric/fabtests && ./autogen.sh && ./configure --with-libfabric=/usr &&
#            make benchmarks/fi_msg_bw benchmarks/fi_rma_bw benchmarks/fi_rdm_tagged_bw
#        fi_rma_bw -o write moves data both ways at once in 1.17 (one direction is
#        reported); -o writedata is the one-way stream to compare with write_bw.
# Usage: ROUNDS=7 FABTESTS=.../fabtests/benchmarks bench/fabtests.sh [results-file]
set -u
ROUNDS=${ROUNDS:-7}
SIZE=${SIZE:-1048576}
ITERS=${ITERS:-2000}
FABTESTS=${FABTESTS:-/tmp/fabtests-build/fabtests/benchmarks}
GOVERBS_SRC=${GOVERBS_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
GOVERBS_BIN=${GOVERBS_BIN:-$(mktemp -d)/goverbs}
RDM=${RDM:-1}          # also run fi_rdm_tagged_bw over "tcp;ofi_rxm" (FI_EP_RDM)
OUT=${1:-fabtests-results.txt}
TO=120                 # per-run timeout, seconds

(cd "$GOVERBS_SRC" && go build -o "$GOVERBS_BIN" ./cmd/goverbs) || { echo "goverbs build failed" >&2; exit 1; }

exec > >(tee "$OUT") 2>&1
echo "# $(date -u +%FT%TZ) host=$(hostname) nproc=$(nproc) libfabric=$(fi_info --version | sed -n 2p)"
echo "# goverbs $(cd "$GOVERBS_SRC" && git rev-parse --short HEAD 2>/dev/null) size=$SIZE iters=$ITERS rounds=$ROUNDS"

wait_listen() { # port: wait until something listens on it (max ~5 s)
	for _ in $(seq 100); do ss -Hltn "sport = :$1" | grep -q . && return 0; sleep 0.05; done
	return 1
}

# fabtest NAME PORT ARGS...: server then client (two processes); prints client MB/s.
fabtest() {
	local bin=$1 port=$2; shift 2
	local sv; sv=$(mktemp)
	timeout $TO "$FABTESTS/$bin" "$@" -S "$SIZE" -I "$ITERS" -B "$port" >"$sv" 2>&1 &
	local spid=$!
	wait_listen "$port"
	local cl; cl=$(timeout $TO "$FABTESTS/$bin" "$@" -S "$SIZE" -I "$ITERS" -P "$port" 127.0.0.1 2>&1)
	wait $spid
	echo "## $bin $* | client: $(echo "$cl" | tail -1) | server: $(tail -1 "$sv")" >&2
	rm -f "$sv"
	echo "$cl" | tail -1 | awk '$1 ~ /^[0-9]/ {print $5; f=1} END {if (!f) print "ERR"}'
}

goverbs_1p() { # both ends in one process (goverbs' default loopback mode)
	local j; j=$("$GOVERBS_BIN" perf write_bw -d iwarp0 -s "$SIZE" -n "$ITERS" -json 2>&1)
	echo "## goverbs 1proc: $j" >&2
	echo "$j" | jq -r 'select(.test=="write_bw") | .bw_avg_mb_s | floor' 2>/dev/null || echo ERR
}

goverbs_2p() { # server and client as separate processes, like the fabtests
	local port=18600
	"$GOVERBS_BIN" perf write_bw -server -d iwarp0 -p $port -json >/dev/null 2>&1 &
	local spid=$!
	wait_listen $port
	local j; j=$(timeout $TO "$GOVERBS_BIN" perf write_bw -d iwarp0 -s "$SIZE" -n "$ITERS" -p $port -json 127.0.0.1 2>&1)
	wait $spid
	echo "## goverbs 2proc: $j" >&2
	echo "$j" | jq -r 'select(.test=="write_bw") | .bw_avg_mb_s | floor' 2>/dev/null || echo ERR
}

iperf() {
	iperf3 -s -1 -B 127.0.0.1 -p 5299 >/dev/null 2>&1 &
	local spid=$!
	wait_listen 5299
	local j; j=$(iperf3 -c 127.0.0.1 -p 5299 -t 3 -O 1 -l 1M -J 2>&1)
	wait $spid
	local v; v=$(echo "$j" | jq -r '.end.sum_received.bits_per_second / 8e6 | floor' 2>/dev/null || echo ERR)
	echo "## iperf3 -l 1M: $v MB/s" >&2
	echo "$v"
}

cols="round msg_bw rma_write(bidir,per-dir) rma_writedata"
[ "$RDM" = 1 ] && cols="$cols rdm_tagged_bw(rxm)"
cols="$cols goverbs_1p goverbs_2p iperf3"
echo "# columns: $cols"
declare -A all
for r in $(seq "$ROUNDS"); do
	row=()
	row+=("$(fabtest fi_msg_bw 47620 -p tcp -e msg -d lo)")
	row+=("$(fabtest fi_rma_bw 47621 -p tcp -e msg -d lo -o write)")
	row+=("$(fabtest fi_rma_bw 47622 -p tcp -e msg -d lo -o writedata)")
	[ "$RDM" = 1 ] && row+=("$(fabtest fi_rdm_tagged_bw 47623 -p 'tcp;ofi_rxm' -e rdm -s 127.0.0.1)")
	row+=("$(goverbs_1p)")
	row+=("$(goverbs_2p)")
	row+=("$(iperf)")
	for i in "${!row[@]}"; do all[$i]+="${row[$i]} "; done
	echo "ROUND $r ${row[*]}"
done

median() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{a[NR]=$1} END {if (NR==0) print "NA"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
med=()
for i in $(seq 0 $(( ${#all[@]} - 1 ))); do med+=("$(echo "${all[$i]}" | median)"); done
echo "MEDIAN ${med[*]}"
# ratios: goverbs (1proc and 2proc) over each other column
n=${#med[@]}; g1=${med[$((n-3))]}; g2=${med[$((n-2))]}
names=($cols); names=("${names[@]:1}")
for i in $(seq 0 $((n-1))); do
	[ $i -eq $((n-3)) ] || [ $i -eq $((n-2)) ] && continue
	awk -v a="$g1" -v b="$g2" -v d="${med[$i]}" -v nm="${names[$i]}" \
		'BEGIN {printf "RATIO goverbs_1p/%s = %.2f   goverbs_2p/%s = %.2f\n", nm, a/d, nm, b/d}'
done
