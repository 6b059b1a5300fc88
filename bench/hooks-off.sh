#!/usr/bin/env bash
# What the test-and-debug hooks cost when nothing is turned on (fault
# injection, receive faults, capture, the tracer): the post/poll
# benchmarks of this tree against the same tree with every hook check
# compiled out, interleaved round by round on the same machine.
#
#   bench/hooks-off.sh            # 7 rounds
#   ROUNDS=11 bench/hooks-off.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
ROUNDS=${ROUNDS:-7}
work=$(mktemp -d)
trap 'git worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

# The tree without hooks: each atomic load of a hook becomes a nil
# constant, so the compiler drops the check and what it guards.
git worktree add -q --detach "$work/tree" HEAD
git diff HEAD | (cd "$work/tree" && git apply --allow-empty)
(
	cd "$work/tree"
	sed -i 's/faultHook\.Get()/(*FaultHook)(nil)/g; s/captureHook\.Get()/(*CaptureHook)(nil)/g; s/recvFaultHook\.Get()/(*RecvFaultHook)(nil)/g' \
		internal/engine/*.go
	sed -i 's/tracer\.Load()/(*tracerBox)(nil)/g' verbs/qp.go verbs/cq.go
	sed -i 's/captureFn\.Get() != nil/false/g' provider/iwarp/*.go
	go vet ./internal/engine ./verbs ./provider/iwarp
)

benches=(
	"loop BenchmarkSendRecvRate$"
	"shm BenchmarkRDMAWriteRate$/size=8/list=1$"
	"shm BenchmarkSendRecvPingPong$"
	"iwarp BenchmarkSendRecvPingPong$"
)
for p in loop shm iwarp; do
	go test -c -o "$work/with-$p.test" "./provider/$p"
	(cd "$work/tree" && go test -c -o "$work/without-$p.test" "./provider/$p")
done

for ((r = 1; r <= ROUNDS; r++)); do
	for b in "${benches[@]}"; do
		set -- $b
		for v in with without; do
			"$work/$v-$1.test" -test.run '^$' -test.bench "$2" -test.benchmem -test.benchtime 1s |
				awk -v v="$v" -v p="$1" '/^Benchmark/ {print p, $1, v, $3, $(NF-1)}' >>"$work/results"
		done
	done
done
# provider benchmark build: median ns/op, allocs/op
sort "$work/results" | awk '
{ k = $1 " " $2 " " $3; n[k]++; v[k, n[k]] = $4; a[k] = $5 }
END {
	for (k in n) {
		m = n[k]; for (i = 1; i <= m; i++) s[i] = v[k, i]
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (s[j] < s[i]) { t = s[i]; s[i] = s[j]; s[j] = t }
		med[k] = (m % 2) ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
	}
	for (k in med) { split(k, f, " "); if (f[3] == "with") {
		w = f[1] " " f[2] " without"
		printf "%-6s %-45s with hooks %9.1f ns/op  without %9.1f ns/op  ratio %.3f  allocs %s\n", f[1], f[2], med[k], med[w], med[k] / med[w], a[k]
	} }
}' | sort
