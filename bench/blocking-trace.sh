#!/usr/bin/env bash
# bench/blocking-trace.sh — where a blocking ping-pong's system calls and
# wake-ups go: counts per round trip that the placement and the machine's
# load move much less than its time.
#
#   bench/blocking-trace.sh                          # iWARP and TCP, 8 B
#   ROWS="shm/8/off unix/8/-" N=5000 bench/blocking-trace.sh
#
# For each row of bench/blocking (transport/size/spin) it runs the
# benchmark's N round trips three times (each run includes the processes'
# start and 100 warm-up round trips: use N of a few thousand):
#   1. perf stat: both processes' system calls, context switches, CPU
#      migrations and CPU time, per round trip;
#   2. perf record of read(2)/readv(2)/recvmsg(2) with call stacks: each
#      read classified by its goverbs call path and whether it brought data
#      or found nothing (EAGAIN), per round trip and process;
#   3. perf record -a of the scheduler's wake-ups: for each wake-up of a
#      thread of the two processes, who woke it (the other process, its
#      own, another program) and whether it ran on the waker's CPU, and
#      how long a process's thread ran on after waking the other one
#      before it slept.
# Root (or perf_event_paranoid <= -1) is needed for the tracepoints.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-"iwarp/8/off tcp/8/-"}
N=${N:-3000}
OUT=${OUT:-$(mktemp -d /tmp/blocking-trace.XXXXXX)}
mkdir -p "$OUT"
go test -c -o "$OUT/b.test" ./bench/blocking
run() { # row, then the command that runs the benchmark under a recorder
	local row=$1
	shift
	IFS=/ read -r tr size spin <<<"$row"
	(cd bench/blocking && "$@" "$OUT/b.test" -test.run '^$' -test.bench "^BenchmarkPingPong\$/^$tr\$/^$size\$/^$spin\$" \
		-test.benchtime "${N}x" 2>/dev/null | grep '^Benchmark' || true)
}
calls=task-clock,context-switches,cpu-migrations
for s in read readv recvfrom recvmsg write writev sendto sendmsg epoll_pwait futex nanosleep sched_yield getsockopt setsockopt; do
	calls+=",syscalls:sys_enter_$s"
done
for row in $ROWS; do
	echo "## $row ($N round trips)"
	run "$row" perf stat -x, -e "$calls" -o "$OUT/stat.csv"
	awk -F, -v n="$N" '!/^#/ && NF > 3 && $1 + 0 > 0 {
		v = $1 / n; name = $3; sub(/syscalls:sys_enter_/, "", name)
		if (name == "task-clock") { v *= 1000; name = "CPU µs" }
		if (v >= 0.01) printf "  %-18s %8.2f per round trip\n", name, v }' "$OUT/stat.csv"
	run "$row" perf record -q -o "$OUT/reads.data" -g -e syscalls:sys_exit_read,syscalls:sys_exit_readv,syscalls:sys_exit_recvmsg,syscalls:sys_exit_recvfrom
	perf script -i "$OUT/reads.data" 2>/dev/null | python3 -c "$(
		cat <<'PY'
import re, sys, collections
n = float(sys.argv[1])
skip = re.compile(r'rawRead|readNB|readv2|\.fill$|pumpFrames|\.pump$|-fm$|func\d|Control|rawConn|getComp|GetRecvComp|GetSendComp|internal/poll|syscall\.|runtime\.|os\.')
cnt = collections.Counter()
def flush(hdr, frames):
    m = hdr and re.match(r'\s*\S+\s+\d+\s+\[\d+\]\s+[\d.]+:\s+syscalls:sys_exit_\w+:\s*(0x[0-9a-f]+)', hdr)
    if not m:
        return
    ret = int(m.group(1), 16)
    ret = ret - (1 << 64) if ret >= 1 << 63 else ret
    fr = [re.sub(r'\+0x[0-9a-f]+.*', '', f.split(None, 1)[1]) for f in frames if len(f.split(None, 1)) > 1]
    if not any('bench/blocking' in f for f in fr):
        return
    side = 'server' if any('blocking.serve' in f for f in fr) else 'client'
    path = [f.replace('github.com/goverbs/goverbs/', '') for f in fr if 'goverbs' in f and not skip.search(f)]
    res = 'EAGAIN' if ret == -11 else ('data' if ret > 0 else ('EOF' if ret == 0 else 'error'))
    cnt[(side, res, ' < '.join(p.split('/')[-1] for p in path[:6]))] += 1
hdr, frames = None, []
for line in sys.stdin:
    if not line.strip():
        flush(hdr, frames); hdr, frames = None, []
    elif not line[0].isspace() or re.match(r'\s*\S+\s+\d+\s+\[\d+\]', line):
        flush(hdr, frames); hdr, frames = line, []
    else:
        frames.append(line.strip())
flush(hdr, frames)
print('  reads per round trip, by process, result and call path:')
for (side, res, path), v in sorted(cnt.items(), key=lambda kv: (kv[0][0], -kv[1])):
    if v / n >= 0.02:
        print(f'  {v / n:6.2f} {side:6} {res:6} {path}')
PY
	)" "$N"
	run "$row" perf record -q -a -o "$OUT/sched.data" -e sched:sched_waking,sched:sched_wakeup,sched:sched_switch,sched:sched_migrate_task
	perf script -i "$OUT/sched.data" -F comm,pid,tid,cpu,time,event,trace 2>/dev/null | python3 -c "$(
		cat <<'PY'
import re, sys, collections
n = float(sys.argv[1])
pat = re.compile(r'\s*(.+?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s*(.*)')
ev, tg = [], {}
for line in sys.stdin:
    m = pat.match(line)
    if m:
        comm, pid, tid, cpu, ts, name, rest = m.groups()
        pid, tid = int(pid), int(tid)
        if tid:
            tg[tid] = pid
        ev.append((comm.strip(), pid, tid, int(cpu), float(ts), name, rest))
busy = collections.Counter(p for c, p, *_ in ev if c == 'b.test')
two = sorted(p for p, _ in busy.most_common(2))
if len(two) < 2:
    sys.exit('  no two benchmark processes in the trace')
role = {two[0]: 'client', two[1]: 'server'}
waking, classes, after, pend, mig = {}, collections.Counter(), collections.defaultdict(list), {}, collections.Counter()
for comm, pid, tid, cpu, ts, name, rest in ev:
    if name == 'sched_waking':
        wt = int(re.search(r' pid=(\d+)', rest).group(1))
        waking[wt] = (comm, pid, cpu)
        if pid in role and tg.get(wt) in role and tg[wt] != pid:
            pend[tid] = ts
    elif name == 'sched_wakeup':
        wt = int(re.search(r' pid=(\d+)', rest).group(1))
        tgt = int(re.search(r'target_cpu=(\d+)', rest).group(1))
        w = waking.pop(wt, None)
        if tg.get(wt) not in role or w is None:
            continue
        wcomm, wpid, wcpu = w
        who = role.get(wpid, 'other program')
        if who == role[tg[wt]]:
            who = 'own thread'
        how = "waker's CPU" if wcpu == tgt else 'other CPU' + (', activated by its idle task (IPI)' if pid == 0 else '')
        classes[(role[tg[wt]], who, how)] += 1
    elif name == 'sched_switch':
        pt = int(re.search(r'prev_pid=(\d+)', rest).group(1))
        st = re.search(r'prev_state=(\S+)', rest).group(1)
        if pt in pend and st[0] in 'SD':
            after[role[tg[pt]]].append((ts - pend.pop(pt)) * 1e6)
    elif name == 'sched_migrate_task':
        wt = int(re.search(r' pid=(\d+)', rest).group(1))
        if tg.get(wt) in role:
            mig[role[tg[wt]]] += 1
print('  wake-ups per round trip (woken, by, where):')
for (wakee, who, how), v in sorted(classes.items(), key=lambda kv: -kv[1]):
    if v / n >= 0.02:
        print(f'  {v / n:6.2f} {wakee:6} by {who:13} on {how}')
print('  migrations per round trip: ' + ', '.join(f'{k} {v / n:.3f}' for k, v in sorted(mig.items())))
for k, v in sorted(after.items()):
    v.sort()
    print(f'  {k} runs on after waking the other, until it sleeps: median {v[len(v) // 2]:.0f} µs (quartiles {v[len(v) // 4]:.0f}-{v[3 * len(v) // 4]:.0f}, {len(v)} wake-ups)')
PY
	)" "$N"
done
