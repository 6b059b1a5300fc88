#!/usr/bin/env bash
# What rdmacm connections cost: N iWARP connections (default attributes)
# between two processes on this host, each with a descriptor limit of
# 20,000; prints descriptors, goroutines and memory per connection end, and
# the setup time per 1,000.
#
#   bench/conns.sh [N]     (default 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
N=${1:-10000}
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"; kill $(jobs -p) 2>/dev/null || true' EXIT
go build -o "$BIN/conns" ./bench/conns
ulimit -n 20000
# The acceptor's backlog and the kernel's: enough for a burst of dials.
"$BIN/conns" -server -n "$N" -hold 5s > "$BIN/server.out" 2>&1 &
for _ in $(seq 100); do grep -q listening "$BIN/server.out" 2>/dev/null && break; sleep 0.05; done
"$BIN/conns" -n "$N" -hold 3s
wait %1 || { cat "$BIN/server.out"; exit 1; }
grep -v listening "$BIN/server.out"
