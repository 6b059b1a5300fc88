#!/usr/bin/env bash
# bench/rsocket.sh — package rsocket against the kernel's sockets, same run.
#
#   bench/rsocket.sh                 # ROUNDS=3, BENCHTIME=1s; 8 to 12 minutes
#   ROUNDS=5 OUT=/tmp/r bench/rsocket.sh
#
# Ping-pong latency (round trip) and streaming throughput at 64 B, 4 KiB,
# 64 KiB and 1 MiB: rsocket over shared memory against net.UnixConn, rsocket
# over iWARP (loopback TCP) against loopback net.TCPConn; and gRPC (module
# examples/grpc) unary latency and streaming throughput over rsocket (shm)
# against gRPC over a Unix socket. Both ends of each connection are in one
# process, except the two-process rows: gRPC's UnaryIPC and net/http's
# HTTPIPC (bench/rsocket), whose server runs in a process of its own. Those
# run in three placements: free (the scheduler's choice), same (both
# processes on CPU 0: taskset, which makes GOMAXPROCS 1) and split (client
# on CPU 0, server on CPU 1), and report the CPU time and context switches
# of both processes per call, which do not depend on placement.
# Every round runs every pair back to back (interleaved), each cell is the
# median of the rounds and each ratio is taken between medians
# of this run (the last column: the median of each round's ratio, its two
# runs back to back): the machine drifts too much for figures of different
# runs to be compared.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
BENCHTIME=${BENCHTIME:-1s}
OUT=${OUT:-$(mktemp -d /tmp/rsocket-bench.XXXXXX)}
mkdir -p "$OUT"
go test -c -o "$OUT/rs.test" ./bench/rsocket
(cd examples/grpc && go test -c -o "$OUT/grpc.test" .)
raw="$OUT/raw.tsv"
: >"$raw"
run() { # binary bench-regex -> lines "name ns/op MB/s cpu-us/op csw/op"
	"$1" -test.run XXX -test.bench "$2" -test.benchtime "$BENCHTIME" 2>/dev/null |
		awk '/^Benchmark/ {
			n=$1; sub(/-[0-9]+$/, "", n); v["ns/op"]=v["MB/s"]=v["cpu-us/op"]=v["csw/op"]=""
			for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
			print n "\t" v["ns/op"] "\t" v["MB/s"] "\t" v["cpu-us/op"] "\t" v["csw/op"]
		}'
}
place() { # placement binary bench-regex
	case $1 in
	free) run "$2" "$3" ;;
	same) taskset -c 0 bash -c "$(declare -f run); BENCHTIME=$BENCHTIME run $2 '$3'" ;;
	split) GOVERBS_IPC_SERVER_PREFIX="taskset -c 1" taskset -c 0 bash -c "$(declare -f run); BENCHTIME=$BENCHTIME run $2 '$3'" ;;
	esac
}
for r in $(seq "$ROUNDS"); do
	echo "round $r/$ROUNDS" >&2
	for size in 64 4096 65536 1048576; do
		for t in PingPong Stream; do
			for tr in rsocket-shm unix rsocket-iwarp tcp; do
				run "$OUT/rs.test" "^Benchmark$t\$/^$tr\$/^$size\$" | sed "s/^/$r\t/" >>"$raw"
			done
		done
	done
	for b in "Unary/.*/(64|4096|65536)" "Stream/.*/(4096|65536|1048576)"; do
		for tr in rsocket-shm unix; do
			run "$OUT/grpc.test" "^Benchmark${b%%/*}\$/^$tr\$/${b#*/*/}" | sed "s/^/$r\tgRPC/" >>"$raw"
		done
	done
	for pl in free same split; do
		for size in 64 4096 65536; do
			for tr in rsocket-shm unix; do
				place $pl "$OUT/grpc.test" "^BenchmarkUnaryIPC\$/^$tr\$/^$size\$" |
					sed "s/^BenchmarkUnaryIPC/gRPCBenchmarkUnaryIPC@$pl/; s/^/$r\t/" >>"$raw"
				place $pl "$OUT/rs.test" "^BenchmarkHTTPIPC\$/^$tr\$/^$size\$" |
					sed "s/^BenchmarkHTTPIPC/BenchmarkHTTPIPC@$pl/; s/^/$r\t/" >>"$raw"
			done
		done
	done
done
python3 - "$raw" >"$OUT/table.txt" <<'PY'
import sys, statistics, collections
cells = collections.defaultdict(list)
rounds = collections.defaultdict(dict)
num = lambda x: float(x) if x else 0.0
for line in open(sys.argv[1]):
    r, name, ns, mbs, cpu, csw = (line.rstrip("\n").split("\t") + ["", ""])[:6]
    v = (num(ns), num(mbs), num(cpu), num(csw))
    cells[name].append(v)
    rounds[name][r] = v
med = {k: tuple(statistics.median(x[i] for x in v) for i in range(4)) for k, v in cells.items()}
pairs = [("rsocket-shm", "unix"), ("rsocket-iwarp", "tcp")]
def per_round(ka, kb, unit):
    """The median of the ratios of each round (both run back to back)."""
    rs = []
    for r, a in rounds[ka].items():
        b = rounds[kb].get(r)
        if b is None:
            continue
        if unit == "MB/s":
            rs.append(a[1] / b[1] if b[1] else 0)
        else:
            rs.append(b[0] / a[0] if a[0] else 0)
    return statistics.median(rs) if rs else 0
kinds = [("BenchmarkPingPong", "us RTT"), ("BenchmarkStream", "MB/s"), ("gRPCBenchmarkUnary", "us/call"), ("gRPCBenchmarkStream", "MB/s")]
ipc = [(k + "@" + pl, "us/call") for k in ("gRPCBenchmarkUnaryIPC", "BenchmarkHTTPIPC") for pl in ("free", "same", "split")]
print("%-34s %12s %12s %12s %12s %8s %9s" % ("benchmark/size", "goverbs", "kernel", "goverbs", "kernel", "ratio", "per-round"))
for kind, unit in kinds + ipc:
    two = "@" in kind
    print("-- %s (%s; ratio = how many times better goverbs is%s)" % (kind.replace("Benchmark", " "), unit,
          "; then CPU us and context switches per call, both processes" if two else ""))
    for a, b in pairs:
        for size in ("64", "4096", "65536", "1048576"):
            ka, kb = "%s/%s/%s" % (kind, a, size), "%s/%s/%s" % (kind, b, size)
            if ka not in med or kb not in med:
                continue
            if unit == "MB/s":
                va, vb = med[ka][1], med[kb][1]
                ratio = va / vb if vb else 0
            else:
                va, vb = med[ka][0] / 1000, med[kb][0] / 1000
                ratio = vb / va if va else 0
            line = "%-34s %12.2f %12.2f %12s %12s %8.2fx %8.2fx" % ("%s/%s" % (a + "~" + b, size), va, vb, a, b, ratio, per_round(ka, kb, unit))
            if two:
                ca, cb = med[ka][2], med[kb][2]
                line += "   cpu %6.1f %6.1f (%.2fx)  csw %5.1f %5.1f" % (ca, cb, cb / ca if ca else 0, med[ka][3], med[kb][3])
            print(line)
PY
cat "$OUT/table.txt"
echo "raw measurements: $raw" >&2
