#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME (default 10m) each, JOBS
# at a time (default 1), and prints each target's last progress line (execs,
# new interesting inputs). A crasher stops that target, is written to its
# package's testdata/fuzz/ (keep it there: it becomes a regression test) and
# makes the script exit 1.
#
#   bench/fuzz.sh                  # 10 minutes per target
#   FUZZTIME=30s JOBS=2 bench/fuzz.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
FUZZTIME=${FUZZTIME:-10m}
JOBS=${JOBS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./examples/' | while read -r f; do
	for t in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f"); do
		echo "$(dirname "$f"):$t"
	done
done | sort -u)

run() {
	local pkg=${1%%:*} t=${1##*:}
	local log="$out/$(echo "$pkg-$t" | tr / _).log"
	go test -run '^$' -fuzz "^$t\$" -fuzztime "$FUZZTIME" -parallel 1 "$pkg" >"$log" 2>&1
	local rc=$?
	printf '%-40s %-14s rc=%d  %s\n' "$pkg" "$t" "$rc" "$(grep -o 'elapsed: .*' "$log" | tail -1)"
	if [ $rc -ne 0 ]; then tail -30 "$log"; fi
	return $rc
}

fail=0
pids=()
for t in $targets; do
	run "$t" &
	pids+=($!)
	if [ ${#pids[@]} -ge "$JOBS" ]; then
		wait "${pids[0]}" || fail=1
		pids=("${pids[@]:1}")
	fi
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
exit $fail
