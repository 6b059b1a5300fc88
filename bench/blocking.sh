#!/usr/bin/env bash
# bench/blocking.sh — a blocking ping-pong between two processes: goverbs
# (rdmacm's GetSendComp/GetRecvComp) against the kernel's sockets.
#
#   bench/blocking.sh                               # ROUNDS=3, BENCHTIME=0.5s
#   GOVERBS_BASE=/path/to/old/goverbs bench/blocking.sh   # and that tree's, same run
#   ROUNDS=5 OUT=/tmp/b PLACEMENTS="free split" SIZES=8 bench/blocking.sh
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
# "raw socket" is the Unix or TCP socket again, its reads and writes raw
# system calls as goverbs' are (a control row: with free placement the
# kernel keeps a Go socket ping-pong on one vCPU only while each call goes
# through the runtime's syscall entry, which wakes the sysmon thread).
#
# Placements: where a wake-up lands decides a sleeping round trip on a
# small virtual machine (a wake-up on the other CPU costs tens of
# microseconds there, one on the waker's CPU a few), so each row runs in
# each of PLACEMENTS: "free" (the scheduler's choice, GOMAXPROCS as the
# machine), "split" (client on CPU 0, server on CPU 1), "same" (both on
# CPU 0). Pinned processes get GOMAXPROCS 1 (Go follows the affinity).
# With CPU=1 each cell also gets the CPU time per round trip of both
# processes (perf stat's task-clock over the benchmark's final run of N
# round trips; it includes the processes' start and the benchmark's first
# run of one round trip: use a fixed BENCHTIME such as 5000x), which the
# placement moves much less than the time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
BENCHTIME=${BENCHTIME:-0.5s}
SIZES=${SIZES:-"8 4096 65536"}
PLACEMENTS=${PLACEMENTS:-"free split same"}
# Each group's rows run back to back in each placement: goverbs' row, the
# kernel socket's, and the kernel socket's read and written with raw system
# calls (the control rows for placement: see bench/blocking).
ROWGROUPS=${ROWGROUPS:-"shm,unix,unixraw iwarp,tcp,tcpraw roce,udp"}
OUT=${OUT:-$(mktemp -d /tmp/blocking-bench.XXXXXX)}
mkdir -p "$OUT"
go test -c -o "$OUT/new.test" ./bench/blocking
bins=(new)
if [ -n "${GOVERBS_BASE:-}" ]; then
	mkdir -p "$GOVERBS_BASE/bench/blocking"
	cp bench/blocking/bench_test.go bench/blocking/rawsock_unsafe.go "$GOVERBS_BASE/bench/blocking/"
	(cd "$GOVERBS_BASE" && go test -c -o "$OUT/old.test" ./bench/blocking)
	bins=(old new)
fi
raw="$OUT/raw.tsv"
: >"$raw"
run() { # placement binary pattern
	local pre=() env=()
	case $1 in
	split) pre=(taskset -c 0) env=(GOVERBS_BLOCKING_SERVER_PREFIX="taskset -c 1") ;;
	same) pre=(taskset -c 0) ;;
	esac
	if [ "${CPU:-0}" = 1 ]; then
		env "${env[@]}" perf stat -x, -e task-clock -o "$OUT/perf.tmp" "${pre[@]}" "$OUT/$2.test" -test.run '^$' -test.bench "$3" -test.benchtime "$BENCHTIME" 2>/dev/null
		awk -F, '!/^#/ && $3 == "task-clock" {print "CPU", $1}' "$OUT/perf.tmp"
	else
		env "${env[@]}" "${pre[@]}" "$OUT/$2.test" -test.run '^$' -test.bench "$3" -test.benchtime "$BENCHTIME" 2>/dev/null
	fi
}
for r in $(seq "$ROUNDS"); do
	echo "round $r/$ROUNDS" >&2
	for size in $SIZES; do
		for group in $ROWGROUPS; do
			for pl in $PLACEMENTS; do
				for b in "${bins[@]}"; do
					for tr in ${group//,/ }; do
						spins="off adaptive"
						case $tr in unix* | tcp* | udp) spins="-" ;; esac
						for spin in $spins; do
							(cd bench/blocking && run "$pl" "$b" "^BenchmarkPingPong\$/^$tr\$/^$size\$/^$spin\$") |
								awk -v r="$r" -v b="$b" -v pl="$pl" '
									/^Benchmark/ {n=$1; sub(/-[0-9]+$/, "", n); ns=$3; ops=$2}
									/^CPU/ {cpu=$2}
									END {if (n) print r "\t" b "\t" pl "\t" n "\t" ns "\t" (cpu ? cpu * 1e3 / ops : "")}' >>"$raw"
						done
					done
				done
			done
		done
	done
done
python3 - "$raw" >"$OUT/table.md" <<'PY'
import sys, statistics, collections
cells, cpus = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    r, b, pl, name, ns, cpu = line.rstrip("\n").split("\t")
    _, tr, size, spin = name.split("/")
    cells[(b, pl, tr, int(size), spin)].append(float(ns))
    if cpu:
        cpus[(b, pl, tr, int(size), spin)].append(float(cpu))
med = {k: statistics.median(v) for k, v in cells.items()}
cmed = {k: statistics.median(v) for k, v in cpus.items()}
peer = {"shm": "unix", "iwarp": "tcp", "roce": "udp"}
bins = sorted({k[0] for k in med}, key=lambda b: b != "old")
places = [p for p in ("free", "split", "same") if any(k[1] == p for k in med)]
raw = {"shm": "unixraw", "iwarp": "tcpraw"}
hdr = "| size | goverbs | spin | placement | " + " | ".join(f"{b} µs | {b} socket µs | {b} ratio | {b} raw socket µs" for b in bins)
if cmed:
    hdr += " | " + " | ".join(f"{b} CPU µs | {b} socket CPU µs" for b in bins)
print(hdr + " |")
print("|" + "---|" * (hdr.count("|") - 1))
for size in sorted({k[3] for k in med}):
    for tr in ("shm", "iwarp", "roce"):
        for spin in ("off", "adaptive"):
            for pl in places:
                row = [f"{size} B" if size < 1024 else f"{size // 1024} KiB", f"{tr} vs {peer[tr]}", spin, pl]
                if not any((b, pl, tr, size, spin) in med for b in bins):
                    continue
                for b in bins:
                    g, k = med.get((b, pl, tr, size, spin)), med.get((b, pl, peer[tr], size, "-"))
                    rk = med.get((b, pl, raw.get(tr), size, "-"))
                    row += [f"{g / 1e3:.1f}" if g else "-", f"{k / 1e3:.1f}" if k else "-", f"{g / k:.2f}x" if g and k else "-",
                            f"{rk / 1e3:.1f}" if rk else "-"]
                if cmed:
                    for b in bins:
                        g, k = cmed.get((b, pl, tr, size, spin)), cmed.get((b, pl, peer[tr], size, "-"))
                        row += [f"{g:.0f}" if g else "-", f"{k:.0f}" if k else "-"]
                print("| " + " | ".join(row) + " |")
PY
cat "$OUT/table.md"
echo "raw: $raw" >&2
