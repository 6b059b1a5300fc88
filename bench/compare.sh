#!/usr/bin/env bash
# goverbs against its peers on this machine, in one run, with same-run ratios:
#
#   latency (one-way, median and mean): goverbs perf send_lat  vs  libfabric
#       fi_pingpong (tcp msg, shm rdm; it reports the mean only) and UCX
#       ucx_perftest tag_lat (tcp, posix shared memory). The median is the
#       figure ../shared/bench gives for UCX (lat_oneway_p50_us) and perftest's
#       t_typical; the mean also carries the stalls the machine adds.
#   blocking latency (one-way, median and mean; EVENTS=0 leaves it out):
#       goverbs perf send_lat -e (completion events: ReqNotify, GetEvent)
#       between two processes  vs  UCX ucx_perftest tag_lat -E sleep (tcp,
#       posix) and a Go net.Conn ping-pong over a Unix socket and loopback
#       TCP (bench/sockpp), every side blocked between messages
#   bandwidth (streaming):   goverbs perf write_bw  vs  UCX ucx_perftest tag_bw
#       (tcp, posix) and raw loopback TCP (iperf3 -l SIZE); both warm up
#       first (BW_WARM untimed requests, as UCX's -w 100)
#
# GOVERBS_BASE=/path/to/goverbs adds an older build measured in the same
# rounds (rows "base DEV"); POST_LIST=N adds write_bw -l N on shm0 (see
# bench/README.md); SEND_BW=1 adds send_bw on shm0 (rows "shm0-send",
# against UCX's tag_bw, the "UCX posix" row).
#
# at 8 B, 4 KiB, 64 KiB and 1 MiB. The machine's speed drifts from minute to
# minute (../shared/bench/README.md), so the measurements are interleaved:
# each round measures every tool at every size, ROUNDS times, and the table
# gives the median of each cell and goverbs/peer ratios of those medians.
# It also draws latency and bandwidth against message size (bench/plot, a
# module of its own so that the main go.mod stays lean).
#
#   bench/compare.sh                 (ROUNDS=3: four to six minutes)
#   ROUNDS=5 OUT=/tmp/b bench/compare.sh
#
# Needs Debian's libfabric-bin, ucx-utils and iperf3 (installed with apt-get
# when missing; root or sudo) and Go. Method and commands follow
# ../shared/bench (REPORT.md): loopback only (FI_*_IFACE=lo, UCX_NET_DEVICES=lo);
# libfabric's fi_pingpong is the only libfabric test Debian 12 ships (no
# fabtests: no fi_rma_bw), so libfabric appears in the latency table only.
# Units: µs; MB/s = 10^6 bytes/s (UCX's MiB/s are converted). goverbs runs
# both ends in one process over a real loopback TCP connection, the peers run
# a server and a client process.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-"8 4096 65536 1048576"}
OUT=${OUT:-$(mktemp -d /tmp/goverbs-bench.XXXXXX)}
mkdir -p "$OUT"
# The goverbs devices measured: iwarp0 (iWARP over loopback TCP) and shm0
# (shared memory, one-sided operations by the initiator alone). With shm0 the
# tables also get the same-host floors of ../shared/bench, when it is there:
# C memcpy of the message (bandwidth) and a Go cache-line ping-pong between
# two processes (latency), and UCX's one-sided put (ucp_put_bw).
GOVERBS_DEVS=${GOVERBS_DEVS:-iwarp0 shm0}
# GOVERBS_BASE, when set, is another goverbs binary (a "before" build: e.g.
# `git stash; go build -o /tmp/goverbs.base ./cmd/goverbs`) measured in the
# same rounds as this tree's, right next to it (which of the two goes first
# alternates from round to round): rows "base DEV", and ratios DEV/base DEV.
GOVERBS_BASE=${GOVERBS_BASE:-}
# POST_LIST, when set (e.g. 16), adds a streaming row "goverbs shm0-lN":
# write_bw on shm0 posting lists of N requests (perftest's post_list, -l),
# with its own ratios.
POST_LIST=${POST_LIST:-}
# SEND_BW, when set, adds a streaming row "goverbs shm0-send": send_bw on
# shm0 (SEND/RECV, one request per PostSend, UCX tag_bw's iterations; a
# GOVERBS_BASE build whose send_bw still posts every receive before the
# run runs 8192 at most), with its own ratios.
SEND_BW=${SEND_BW:-}
SHARED_BENCH=${SHARED_BENCH:-../shared/bench}
# EVENTS=0 leaves out the blocking-latency table (goverbs perf -e, UCX -E
# sleep, the kernel sockets' ping-pong).
EVENTS=${EVENTS:-1}
# The ports the tools listen on (change them when another run may share
# the machine): libfabric, UCX, iperf3, and the blocking table's (goverbs
# perf -e and bench/sockpp).
FI_PORT=${FI_PORT:-47610}
UCX_PORT=${UCX_PORT:-13377}
IPERF_PORT=${IPERF_PORT:-5299}
EV_PORT=${EV_PORT:-7590}
# Before each size of each round, wait up to IDLE_WAIT seconds for the CPUs
# to be idle (../shared/bench/src/idlewait.sh: other work shares the machine,
# and means are sensitive to it); the busy share found is printed.
SB=${SHARED_BENCH:-../shared/bench}
IDLE_WAIT=${IDLE_WAIT:-20}
idle() { if [ -x "$SB/src/idlewait.sh" ] || [ -f "$SB/src/idlewait.sh" ]; then bash "$SB/src/idlewait.sh" "$IDLE_WAIT"; else echo "busy=?"; fi; }

need=""
command -v fi_pingpong >/dev/null || need="$need libfabric-bin"
command -v ucx_perftest >/dev/null || need="$need ucx-utils"
command -v iperf3 >/dev/null || need="$need iperf3"
if [ -n "$need" ]; then
	SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
	echo "installing$need"
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y $need >/dev/null || { echo "apt-get install$need failed"; exit 1; }
fi
# The tools are built outside OUT, which holds only results (and may be committed).
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
go build -o "$BIN/goverbs" ./cmd/goverbs || exit 1
go build -o "$BIN/sockpp" ./bench/sockpp || exit 1
floors=""
case " $GOVERBS_DEVS " in *" shm0 "*)
	if [ -f "$SHARED_BENCH/src/memcpy_bw.c" ] && gcc -O2 -o "$BIN/memcpy_bw" "$SHARED_BENCH/src/memcpy_bw.c" &&
		(cd "$SHARED_BENCH/src/goshm" && go build -o "$BIN/goshm" .); then
		floors=1
	else
		echo "($SHARED_BENCH/src not found or not buildable: no memcpy / cache-line floors)"
	fi ;;
esac
(cd bench/plot && go build -o "$BIN/plot" .) || exit 1

export FI_TCP_IFACE=lo
RES=$OUT/raw.tsv   # round  metric  size  tool  value
: > "$RES"
rec() { [ -n "$5" ] && printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$RES"; }

# pair SERVER-CMD CLIENT-CMD: run a server in the background, then the client;
# prints the client's output.
pair() {
	timeout 60 bash -c "$1" >/dev/null 2>&1 &
	local spid=$!
	sleep 0.6
	timeout 60 bash -c "$2" 2>&1
	sleep 0.2; kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
}
lat_iters() { case $1 in 8) echo 100000 ;; 4096) echo 20000 ;; 65536) echo 5000 ;; *) echo 500 ;; esac; }
# Untimed warm-up iterations of the latency tests that have them (UCX's -w,
# goverbs' -w): ../shared/bench runs UCX with -w 10000.
LAT_WARM=${LAT_WARM:-10000}
# Untimed warm-up requests of the bandwidth tests: UCX's -w (100 unless
# given, see ucx below) and goverbs' -w (a GOVERBS_BASE build older than
# bandwidth warm-ups runs without).
BW_WARM=${BW_WARM:-100}
bw_iters() { case $1 in 8) echo 200000 ;; 4096) echo 100000 ;; 65536) echo 20000 ;; *) echo 2000 ;; esac; }
# sendbw_iters WHO ITERS: send_bw's iterations for a build: a base build
# that cannot run more than 8192 (its send_bw posted every receive before
# the run) gets 8192.
sendbw_iters() {
	if [ "$1" = base ] && ! "$(bin base)" perf --help 2>&1 | grep -q "512 receives"; then
		echo $(($2 < 8192 ? $2 : 8192))
	else
		echo "$2"
	fi
}
jsonval() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" | tail -1; }

fi_lat() { # provider endpoint size iters
	local dom="-d lo"; [ "$1" = shm ] && dom=""
	pair "fi_pingpong -p $1 -e $2 $dom -S $3 -I $4 -B $FI_PORT" "fi_pingpong -p $1 -e $2 $dom -S $3 -I $4 -P $FI_PORT 127.0.0.1" |
		awk 'NF==8 && $5 ~ /s$/ {v=$7} END{print v}'
}
ucx() { # TLS test size iters [warm-up [more flags]] -> "lat_p50_us lat_mean_us bw_MBps"
	local env="UCX_TLS=$1"; [ "$1" = tcp ] && env="$env UCX_NET_DEVICES=lo"
	local w=${5:-100} more=${6:-}
	pair "$env ucx_perftest -t $2 -s $3 -n $4 -w $w -p $UCX_PORT -f $more" "$env ucx_perftest 127.0.0.1 -t $2 -s $3 -n $4 -w $w -p $UCX_PORT -f $more" |
		awk 'NF==8 && $1 ~ /^[0-9]+$/ {p=$2; l=$4; b=$6*1.048576} END{if (l!="") print p, l, b}'
}
iperf() { # size
	pair "iperf3 -s -1 -B 127.0.0.1 -p $IPERF_PORT" "iperf3 -c 127.0.0.1 -p $IPERF_PORT -t 3 -O 1 -J -l $1" |
		python3 -c 'import json,sys; d=sys.stdin.read(); print(json.loads(d[d.index("{"):])["end"]["sum_received"]["bits_per_second"]/8e6)' 2>/dev/null
}

# The blocking table: iterations per size (a blocking round trip costs tens
# of microseconds: two wake-ups) and untimed ones first.
elat_iters() { case $1 in 8|4096) echo 10000 ;; 65536) echo 5000 ;; *) echo 500 ;; esac; }
EV_WARM=${EV_WARM:-1000}
# evlat BIN DEV SIZE ITERS: goverbs perf send_lat -e between two processes.
evlat() {
	pair "$1 perf send_lat -d $2 --server -e -p $EV_PORT" "$1 perf send_lat -d $2 localhost -p $EV_PORT -e -s $3 -n $4 -w $EV_WARM -json"
}
# sock NET SIZE ITERS: bench/sockpp between two processes.
sock() {
	local a="@goverbs-sockpp-$EV_PORT"; [ "$1" = tcp ] && a="127.0.0.1:$EV_PORT"
	pair "$BIN/sockpp -server -net $1 -addr $a" "$BIN/sockpp -net $1 -addr $a -s $2 -n $3 -w $EV_WARM"
}

# builds ROUND: the goverbs builds to measure, in this round's order;
# bin/label: a build's binary and its rows' name.
builds() { if [ -z "$GOVERBS_BASE" ]; then echo new; elif [ $(($1 % 2)) = 1 ]; then echo new base; else echo base new; fi; }
bin() { if [ "$1" = base ]; then echo "$GOVERBS_BASE"; else echo "$BIN/goverbs"; fi; }
label() { if [ "$1" = base ]; then echo base; else echo goverbs; fi; }

start=$(date +%s)
for r in $(seq "$ROUNDS"); do
	echo "== round $r of $ROUNDS ($(( $(date +%s) - start )) s)"
	for S in $SIZES; do
		L=$(lat_iters "$S"); B=$(bw_iters "$S")
		echo "   $S B: $(idle) before"
		for dev in $GOVERBS_DEVS; do
			for who in $(builds "$r"); do
				out=$("$(bin "$who")" perf send_lat -d "$dev" -s "$S" -n "$L" -w "$LAT_WARM" -json)
				rec "$r" lat "$S" "$(label "$who") $dev" "$(echo "$out" | jsonval t_avg_us)"
				rec "$r" lat50 "$S" "$(label "$who") $dev" "$(echo "$out" | jsonval t_typical_us)"
			done
		done
		rec "$r" lat "$S" "libfabric tcp" "$(fi_lat tcp msg "$S" "$L")"
		rec "$r" lat "$S" "libfabric shm" "$(fi_lat shm rdm "$S" "$((L * 2))")"
		out=$(ucx tcp tag_lat "$S" "$L" "$LAT_WARM")
		rec "$r" lat "$S" "UCX tcp" "$(echo "$out" | cut -d' ' -f2)"
		rec "$r" lat50 "$S" "UCX tcp" "$(echo "$out" | cut -d' ' -f1)"
		out=$(ucx posix,self tag_lat "$S" "$((L * 2))" "$LAT_WARM")
		rec "$r" lat "$S" "UCX posix" "$(echo "$out" | cut -d' ' -f2)"
		rec "$r" lat50 "$S" "UCX posix" "$(echo "$out" | cut -d' ' -f1)"
		if [ -n "$floors" ] && [ "$S" = 8 ]; then
			rec "$r" lat50 "$S" "cache-line ping-pong" "$(pair "$BIN/goshm server" "$BIN/goshm client" |
				sed -n 's/.*one-way p50=\([0-9.]*\)\(n\|µ\)s.*/\1 \2/p' | awk '{print ($2=="n") ? $1/1000 : $1}')"
		fi
		if [ "$EVENTS" = 1 ]; then
			E=$(elat_iters "$S")
			for dev in $GOVERBS_DEVS; do
				for who in $(builds "$r"); do
					out=$(evlat "$(bin "$who")" "$dev" "$S" "$E")
					rec "$r" elat "$S" "$(label "$who") $dev-e" "$(echo "$out" | jsonval t_avg_us)"
					rec "$r" elat50 "$S" "$(label "$who") $dev-e" "$(echo "$out" | jsonval t_typical_us)"
				done
			done
			for tls in tcp posix; do
				t=$tls; [ "$tls" = posix ] && t=posix,self
				out=$(ucx "$t" tag_lat "$S" "$E" "$EV_WARM" "-E sleep")
				rec "$r" elat "$S" "UCX $tls -E sleep" "$(echo "$out" | cut -d' ' -f2)"
				rec "$r" elat50 "$S" "UCX $tls -E sleep" "$(echo "$out" | cut -d' ' -f1)"
			done
			for net in unix tcp; do
				name="Unix socket"; [ "$net" = tcp ] && name="TCP socket"
				out=$(sock "$net" "$S" "$E")
				rec "$r" elat "$S" "$name" "$(echo "$out" | jsonval t_avg_us)"
				rec "$r" elat50 "$S" "$name" "$(echo "$out" | jsonval t_typical_us)"
			done
		fi
		for dev in $GOVERBS_DEVS; do
			for who in $(builds "$r"); do
				warm="-w $BW_WARM"; [ "$who" = base ] && warm=""
				rec "$r" bw "$S" "$(label "$who") $dev" "$("$(bin "$who")" perf write_bw -d "$dev" -s "$S" -n "$B" $warm -json | jsonval bw_avg_mb_s)"
			done
			if [ -n "$POST_LIST" ] && [ "$dev" = shm0 ]; then
				for who in $(builds "$r"); do
					warm="-w $BW_WARM"; [ "$who" = base ] && warm=""
					rec "$r" bw "$S" "$(label "$who") shm0-l$POST_LIST" "$("$(bin "$who")" perf write_bw -d shm0 -s "$S" -n "$B" $warm -l "$POST_LIST" -json | jsonval bw_avg_mb_s)"
				done
			fi
			if [ -n "$SEND_BW" ] && [ "$dev" = shm0 ]; then
				for who in $(builds "$r"); do
					rec "$r" bw "$S" "$(label "$who") shm0-send" "$("$(bin "$who")" perf send_bw -d shm0 -s "$S" -n "$(sendbw_iters "$who" "$B")" -json | jsonval bw_avg_mb_s)"
				done
			fi
		done
		rec "$r" bw "$S" "UCX tcp" "$(ucx tcp tag_bw "$S" "$B" | cut -d' ' -f3)"
		rec "$r" bw "$S" "UCX posix" "$(ucx posix,self tag_bw "$S" "$B" | cut -d' ' -f3)"
		if [ -n "$floors" ]; then
			rec "$r" bw "$S" "UCX posix put" "$(ucx posix,self ucp_put_bw "$S" "$B" | cut -d' ' -f3)"
			rec "$r" bw "$S" "C memcpy" "$("$BIN/memcpy_bw" "$S" 1 | sed -n 's/.*GB\/s=\([0-9.]*\).*/\1/p' | awk '{print $1*1000}')"
		fi
		rec "$r" bw "$S" "TCP (iperf3)" "$(iperf "$S")"
	done
done

# medians per cell
awk -F'\t' '{k=$2"\t"$3"\t"$4; v[k]=v[k]" "$5} END{for (k in v) {n=split(v[k],a," "); for(i=1;i<=n;i++)for(j=i+1;j<=n;j++)if(a[j]+0<a[i]+0){t=a[i];a[i]=a[j];a[j]=t}; m=(n%2)?a[(n+1)/2]:(a[n/2]+a[n/2+1])/2; print k"\t"m"\t"n}}' "$RES" |
	sort -t$'\t' -k1,1 -k2,2n -k3,3 > "$OUT/median.tsv"

table() { # metric title unit better
	echo
	echo "$2 [$3], median of $ROUNDS rounds; ratio = goverbs / peer ($4)"
	devs="$GOVERBS_DEVS"
	[ -n "$POST_LIST" ] && [ "$1" = bw ] && devs="$devs shm0-l$POST_LIST"
	[ -n "$SEND_BW" ] && [ "$1" = bw ] && devs="$devs shm0-send"
	case $1 in elat*) devs=$(for d in $GOVERBS_DEVS; do printf '%s-e ' "$d"; done) ;; esac
	awk -F'\t' -v m="$1" -v devs="$devs" '
		$1==m {v[$2"\t"$3]=$4; if (!($3 in seen)) {seen[$3]=1; tools[++nt]=$3}; if (!($2 in ss)) {ss[$2]=1; sizes[++ns]=$2}}
		END {
			nd=split(devs, d, " ")
			printf "%-26s", "tool"; for (i=1;i<=ns;i++) printf "%12s", sizes[i] " B"; printf "\n"
			for (t=1;t<=nt;t++) {
				printf "%-26s", tools[t]
				for (i=1;i<=ns;i++) { x=v[sizes[i]"\t"tools[t]]; if (x=="") printf "%12s", "-"; else printf "%12.2f", x }
				printf "\n"
			}
			for (k=1;k<=nd;k++) for (t=1;t<=nt;t++) {
				if (tools[t] ~ /^goverbs/) continue
				if (tools[t] ~ /^base / && tools[t] != "base " d[k]) continue # a build against itself only
				printf "%-26s", "  " d[k] "/" tools[t]
				for (i=1;i<=ns;i++) { g=v[sizes[i]"\tgoverbs " d[k]]; p=v[sizes[i]"\t"tools[t]]; if (g==""||p==""||p==0) printf "%12s", "-"; else printf "%12.2f", g/p }
				printf "\n"
			}
		}' "$OUT/median.tsv"
}
{
	echo "goverbs vs peers, $(date -u +%FT%TZ), $(nproc) CPUs, $ROUNDS interleaved rounds"
	table lat50 "one-way latency (median of each run's samples)" "us" "above 1: goverbs slower"
	table lat "one-way latency (mean)" "us" "above 1: goverbs slower"
	if [ "$EVENTS" = 1 ]; then
		table elat50 "blocking one-way latency, two processes, every side asleep between messages (median)" "us" "above 1: goverbs slower"
		table elat "blocking one-way latency, two processes (mean)" "us" "above 1: goverbs slower"
	fi
	table bw "streaming bandwidth" "MB/s" "below 1: goverbs slower"
} | tee "$OUT/table.txt"
"$BIN/plot" -in "$OUT/median.tsv" -out "$OUT/compare.png" -title "goverbs vs peers, loopback, $(nproc) CPUs" && echo "plot: $OUT/compare.png"
echo "raw: $RES; medians: $OUT/median.tsv; table: $OUT/table.txt; $(( $(date +%s) - start )) s"
