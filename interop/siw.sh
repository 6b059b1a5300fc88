#!/usr/bin/env bash
# Interoperability of goverbs with the Linux SoftiWARP driver (siw) and the
# rdma-core tools, in the VM of ../shared/vmlab (root needed; see its README).
#
#   interop/siw.sh            siw as built by default (MPA CRC off)
#   interop/siw.sh --crc      siw rebuilt to require MPA CRC (SIW_MPA_CRC=1)
#   KEEP=1 interop/siw.sh     leave the VM running afterwards
#
# goverbs runs on the host inside the lab's network namespace (10.77.0.1),
# the rdma-core programs in the guest (10.77.0.2, device siw0). Each case
# runs in both directions. The script prints one line per case and a summary,
# and exits non-zero if any case failed.
set -uo pipefail
cd "$(dirname "$0")/.."
LAB=${VMLAB:-../shared/vmlab/vmlab.sh}
[ -x "$LAB" ] || { echo "$0: no lab at $LAB: set VMLAB to the lab's vmlab.sh (see README.md, the interop scripts)" >&2; exit 2; }
BIN=${BIN:-/tmp/goverbs-interop}
COUNT=${COUNT:-100}
SIZES=${SIZES:-"64 1024 4096 16384 65535"}
crc=0
[ "${1:-}" = "--crc" ] && crc=1

export PATH="/usr/local/go/bin:$PATH"
mkdir -p "$BIN"
go build -o "$BIN/goverbs" ./cmd/goverbs || exit 1
go build -o "$BIN/rdma_server" ./examples/rdma_server || exit 1
go build -o "$BIN/rdma_client" ./examples/rdma_client || exit 1

start=$(date +%s)
TIMEOUT=20 "$LAB" exec true >/dev/null 2>&1 && running=1 || running=0
if [ "$crc" = 1 ]; then
	[ "$running" = 1 ] && "$LAB" stop >/dev/null 2>&1
	SIW_MPA_CRC=1 "$LAB" build >/dev/null 2>&1 || exit 1
	"$LAB" start >/dev/null 2>&1 || exit 1
elif [ "$running" = 0 ]; then
	"$LAB" build >/dev/null 2>&1 || exit 1
	"$LAB" start >/dev/null 2>&1 || exit 1
fi
[ "$crc" = 1 ] && flags="-crc" || flags=""

pass=0; fail=0
LOGS=${LOGS:-/tmp/goverbs-interop/logs}
mkdir -p "$LOGS"
result() { # name rc
	if [ "$2" = 0 ]; then echo "PASS $1"; pass=$((pass+1)); else
		echo "FAIL $1"; fail=$((fail+1))
		n=$(echo "$1" | tr -c 'A-Za-z0-9' _)
		{ echo "== local"; cat /tmp/interop.out; echo "== goverbs server"; cat /tmp/gping.log /tmp/grs.log 2>/dev/null
		  echo "== guest"; "$LAB" exec 'cat /tmp/peer.log' 2>&1; } > "$LOGS/$n.log" 2>&1
		echo "     (details in $LOGS/$n.log)"
	fi
}
# guest_bg CMD PORT: run a server in the guest and wait until it listens.
guest_bg() {
	"$LAB" exec "pkill -x rping; pkill -x rdma_server; sleep 0.3; rm -f /tmp/peer.log; (timeout 120 $1 > /tmp/peer.log 2>&1; echo rc=\$? >> /tmp/peer.log) &" >/dev/null
	"$LAB" exec "for i in \$(seq 100); do ss -ltn | grep -q ':$2 ' && exit 0; sleep 0.1; done; exit 1" >/dev/null
}
# guest_rc: wait for the guest server to exit and check its status.
guest_rc() { "$LAB" exec 'for i in $(seq 100); do grep -q "^rc=" /tmp/peer.log 2>/dev/null && break; sleep 0.1; done; cat /tmp/peer.log' | grep -q '^rc=0'; }
# host_bg CMD LOG PORT: run a goverbs server on the host side and wait until it listens.
host_bg() {
	rm -f "$2"
	"$LAB" host "(timeout 120 $1 > $2 2>&1; echo rc=\$? >> $2) &" >/dev/null
	"$LAB" host "for i in \$(seq 100); do ss -ltn | grep -q ':$3 ' && exit 0; sleep 0.05; done; exit 1" >/dev/null
}
host_rc() { for i in $(seq 100); do grep -q '^rc=' "$1" 2>/dev/null && break; sleep 0.1; done; grep -q '^rc=0' "$1"; }

for S in $SIZES; do
	# goverbs ping client -> rping server (siw)
	guest_bg "rping -s -a 10.77.0.2 -p 7174 -C $COUNT -V -S $S" 7174
	"$LAB" host "$BIN/goverbs ping -c -a 10.77.0.2 -p 7174 -C $COUNT -V -S $S --timeout 30s $flags" >/tmp/interop.out 2>&1
	rc=$?; guest_rc || rc=1
	result "goverbs ping -c  ->  rping -s (siw)   -S $S -C $COUNT -V" $rc
	# rping client (siw) -> goverbs ping server
	host_bg "$BIN/goverbs ping -s -a 10.77.0.1 -p 7174 -S $S --timeout 30s $flags" /tmp/gping.log 7174
	"$LAB" exec "timeout 120 rping -c -a 10.77.0.1 -p 7174 -C $COUNT -V -S $S" >/tmp/interop.out 2>&1
	rc=$?; host_rc /tmp/gping.log || rc=1
	result "rping -c (siw)  ->  goverbs ping -s   -S $S -C $COUNT -V" $rc
done

guest_bg "rdma_server" 7471
"$LAB" host "$BIN/rdma_client -s 10.77.0.2 -t 30s" >/tmp/interop.out 2>&1
rc=$?; guest_rc || rc=1
result "goverbs rdma_client  ->  rdma_server (siw)" $rc
host_bg "$BIN/rdma_server -a 10.77.0.1 -t 30s" /tmp/grs.log 7471
"$LAB" exec "timeout 120 rdma_client -s 10.77.0.1" >/tmp/interop.out 2>&1
rc=$?; host_rc /tmp/grs.log || rc=1
result "rdma_client (siw)  ->  goverbs rdma_server" $rc

# goverbs' --capture of a connection to siw holds the bytes of the wire:
# the TCP stream tcpdump sees on the tap and the one in goverbs' file are
# the same in both directions, and tshark decodes goverbs' file cleanly.
if command -v tcpdump >/dev/null && command -v tshark >/dev/null; then
	guest_bg "rping -s -a 10.77.0.2 -p 7174 -C 5 -V -S 1000" 7174
	"$LAB" host "rm -f /tmp/wire.pcap /tmp/gv.pcapng; (timeout 60 tcpdump -i vmtap0 -s 0 -U -w /tmp/wire.pcap tcp port 7174 >/dev/null 2>&1 &) ; sleep 1
		$BIN/goverbs --capture /tmp/gv.pcapng ping -c -a 10.77.0.2 -p 7174 -C 5 -V -S 1000 --timeout 30s $flags; rc=\$?; sleep 1; pkill -x tcpdump; sleep 0.5; exit \$rc" >/tmp/interop.out 2>&1
	rc=$?; guest_rc || rc=1
	stream() { tshark -r "$1" -q -z follow,tcp,raw,0 2>/dev/null | sed -n '7,$p' | grep -v '^=*$'; }
	if [ $rc = 0 ]; then
		{ [ -n "$(stream /tmp/wire.pcap)" ] && [ "$(stream /tmp/wire.pcap)" = "$(stream /tmp/gv.pcapng)" ]; } || { echo "the recorded stream differs from the wire's" >>/tmp/interop.out; rc=1; }
		bad=$(tshark -r /tmp/gv.pcapng -Y '_ws.malformed || _ws.expert.severity >= "warning" || (tcp.len > 0 && !iwarp_mpa)' 2>/dev/null)
		[ -z "$bad" ] || { echo "tshark: $bad" >>/tmp/interop.out; rc=1; }
	fi
	result "goverbs ping --capture  ->  rping -s (siw): the file's TCP stream is the wire's" $rc
else
	echo "SKIP capture case: tcpdump or tshark missing (apt-get install tcpdump tshark)"
fi

[ "${KEEP:-0}" = 1 ] || "$LAB" stop >/dev/null 2>&1
echo "siw interop (MPA CRC $([ $crc = 1 ] && echo required || echo off)): $pass passed, $fail failed, $(( $(date +%s) - start )) s"
[ "$fail" = 0 ]
