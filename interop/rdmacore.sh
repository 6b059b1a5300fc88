#!/bin/bash
# rdmacore.sh - run provider/rdmacore's tests (the provider-independent
# conformance suite and the provider's own device tests) on the real rxe0
# and siw0 of the lab's VM (see README.md): build the tagged test binary here (the host
# has the guest's Debian release and rdma-core), copy it into the guest,
# run it once per device, and report pass/skip/fail per case.
#
#   interop/rdmacore.sh [-run REGEXP] [DEVICE...]     (default: rxe0 siw0)
#
# Exit status 0 only if every case passed on every device: a skipped test
# fails the run (a device test skips only when it finds no device, which in
# the lab is a broken setup). Cases the suite does not apply to a device
# (its Caps) are listed as "not applicable" by the suite itself.
# Env: VMLAB (the lab's vmlab.sh), GUESTDIR (/root/goverbs-rdmacore), TIMEOUT (per device, s).
set -uo pipefail
cd "$(dirname "$0")/.."
LAB=${VMLAB:-../shared/vmlab/vmlab.sh}
[ -x "$LAB" ] || { echo "$0: no lab at $LAB: set VMLAB to the lab's vmlab.sh (see README.md, the interop scripts)" >&2; exit 2; }
GUESTDIR=${GUESTDIR:-/root/goverbs-rdmacore}
TIMEOUT=${TIMEOUT:-600}
run=.
if [ "${1:-}" = -run ]; then run=$2; shift 2; fi
devs=("$@")
[ ${#devs[@]} -gt 0 ] || devs=(rxe0 siw0)

BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
echo "== build (go test -c -tags rdmacore ./provider/rdmacore)"
go test -c -tags rdmacore -ldflags=-s -o "$BIN/rdmacore.test" ./provider/rdmacore || exit 1

"$LAB" status >/dev/null 2>&1 && TIMEOUT=20 "$LAB" exec true >/dev/null 2>&1 || {
	echo "vmlab is not running: $LAB build && $LAB start"; exit 1; }

# push copies a file into the guest in chunks: vmlab's push passes the whole
# file as one command-line argument, too long for a test binary.
push() {
	local src=$1 dst=$2 c
	gzip -c "$src" | base64 -w0 | split -b 100000 - "$BIN/chunk."
	"$LAB" exec "mkdir -p '$(dirname "$dst")' && rm -f '$dst.b64'" >/dev/null || return 1
	for c in "$BIN"/chunk.*; do
		TIMEOUT=60 "$LAB" exec "echo -n '$(cat "$c")' >> '$dst.b64'" >/dev/null || return 1
	done
	rm -f "$BIN"/chunk.*
	"$LAB" exec "base64 -d '$dst.b64' | gunzip > '$dst' && rm -f '$dst.b64' && chmod +x '$dst'" >/dev/null
}
echo "== push to the guest ($GUESTDIR)"
push "$BIN/rdmacore.test" "$GUESTDIR/rdmacore.test" || { echo "push failed"; exit 1; }

status=0
for dev in "${devs[@]}"; do
	echo "== $dev"
	# The address the iWARP fixture's CM listens on: the device's netdev's.
	addr=$("$LAB" exec "ip -4 -o addr show dev \$(rdma link show $dev/1 | sed -n 's/.*netdev \([^ ]*\).*/\1/p') | awk '{print \$4}' | cut -d/ -f1 | head -1")
	echo "  $dev: netdev address $addr"
	out=$(TIMEOUT=$TIMEOUT "$LAB" exec "cd $GUESTDIR && GOVERBS_RDMACORE_ADDR_$dev=$addr GOVERBS_RDMACORE_DEV=$dev ./rdmacore.test -test.v -test.count=1 -test.run '$run' -test.timeout $((TIMEOUT - 20))s 2>&1")
	rc=$?
	echo "$out" > "/tmp/rdmacore-$dev.log"
	pass=$(echo "$out" | grep -c -- '--- PASS') skip=$(echo "$out" | grep -c -- '--- SKIP') fail=$(echo "$out" | grep -c -- '--- FAIL')
	echo "$out" | grep -E -- '--- (FAIL|SKIP)' | sed 's/^ */  /'
	echo "$out" | grep -E -- '--- FAIL' >/dev/null && echo "$out" | grep -E '^\s+\S+_test\.go:[0-9]+:|^\s+cases_\S+\.go:[0-9]+:' | sed 's/^ */    /' | head -40
	echo "$out" | grep -E 'not applicable to this provider|not run, the device deviates' | sed 's/^ */  /'
	if echo "$out" | grep -q '^panic:\|SIGSEGV\|fatal error:'; then
		echo "  CRASH:"; echo "$out" | grep -A15 -m1 '^panic:\|SIGSEGV\|fatal error:' | sed 's/^/    /'
	fi
	echo "  $dev: $pass passed, $skip skipped, $fail failed (exit $rc; full log /tmp/rdmacore-$dev.log)"
	if [ "$rc" != 0 ] || [ "$fail" != 0 ] || [ "$skip" != 0 ]; then status=1; fi
done
[ $status = 0 ] && echo "ALL PASSED" || echo "FAILED"
exit $status
