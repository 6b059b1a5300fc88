#!/usr/bin/env bash
# bench/grpc-profile.sh — where a gRPC unary call between two processes
# spends its CPU, by layer: gRPC's code, the Go runtime, goverbs' code
# (rsocket and below), and the kernel by system call. It bounds what a
# transport can gain: a call that spends a share s of its CPU in its
# transport is at most 1/(1-s) times faster with a free one.
#
#   bench/grpc-profile.sh                       # 64 B, both processes on CPU 0
#   SIZE=4096 CPUS=0,1 N=5000 bench/grpc-profile.sh
#
# examples/grpc's BenchmarkUnaryIPC (client this process, server the test
# binary run again) runs under perf record -g (-F 15000, both processes:
# the server inherits the client's CPU affinity, CPUS) for the Unix socket
# and for rsocket over shm; each sample is put in one class: "sys:X" when
# it is inside system call X (the function below do_syscall_64), "irq"
# in an interrupt or exception, otherwise by the first frame from the leaf
# up that is goverbs' ("user:goverbs"), gRPC's or x/net/http2's
# ("user:grpc"), or neither ("user:runtime", Go's runtime and libraries).
# With CPUS of one CPU a call's time is its CPU time.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${SIZE:-64}
CPUS=${CPUS:-0}
N=${N:-5000}
OUT=${OUT:-$(mktemp -d /tmp/grpc-profile.XXXXXX)}
(cd examples/grpc && go test -c -o "$OUT/grpc.test" .)
for tr in unix rsocket-shm; do
	(cd examples/grpc && perf record -q -F 15000 -g -o "$OUT/$tr.data" taskset -c "$CPUS" "$OUT/grpc.test" \
		-test.run '^$' -test.bench "^BenchmarkUnaryIPC\$/^$tr\$/^$SIZE\$" -test.benchtime "${N}x" 2>/dev/null | grep '^Benchmark')
	perf script -i "$OUT/$tr.data" -F comm,tid,ip,sym 2>/dev/null | python3 -c "$(
		cat <<'PY'
import sys, collections
c, tot, fr = collections.Counter(), 0, []
def flush():
    global tot
    if not fr:
        return
    tot += 1
    if 'entry_SYSCALL_64_after_hwframe' in fr:
        i = fr.index('do_syscall_64') if 'do_syscall_64' in fr else fr.index('entry_SYSCALL_64_after_hwframe')
        name = next((f for f in reversed(fr[:i]) if f != 'x64_sys_call'), '?')
        c['sys:' + name] += 1
    elif any(f.startswith('asm_') for f in fr):
        c['irq'] += 1
    else:
        k = 'user:runtime'
        for f in fr:
            if 'goverbs' in f:
                k = 'user:goverbs'
                break
            if 'google.golang.org/grpc' in f or 'golang.org/x/net/http2' in f:
                k = 'user:grpc'
                break
        c[k] += 1
for line in sys.stdin:
    if not line.strip():
        flush()
        fr = []
    elif line[0] in ' \t':
        p = line.split()
        if len(p) > 1:
            fr.append(p[1].split('+')[0])
flush()
for k, v in c.most_common():
    if v / tot >= 0.005:
        print(f'  {100 * v / tot:5.1f}%  {k}')
PY
	)"
done
