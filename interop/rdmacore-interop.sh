#!/bin/bash
# rdmacore-interop.sh - goverbs on the real devices of the lab VM's
# guest (provider rdmacore, built with -tags rdmacore) against goverbs'
# pure-Go providers on the host, both directions:
#   iwarp0 (host, iWARP over TCP)  <->  siw0 (guest, kernel siw via rdma_cm)
#   roce   (host, RoCEv2 over UDP)  <->  rxe0 (guest, kernel rxe via rdma_cm)
# with goverbs ping (rping's protocol, -V), goverbs perf -R (perftest's
# rdma_cm protocol) and the rpma examples 01 and 04 (over siw0), and goverbs
# perf over rxe0 and siw0 inside the guest (14 cases).
# Exit status 0 only if every case passed. Env: VMLAB (the lab's vmlab.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
LAB=${VMLAB:-../shared/vmlab/vmlab.sh}
[ -x "$LAB" ] || { echo "$0: no lab at $LAB: set VMLAB to the lab's vmlab.sh (see README.md, the interop scripts)" >&2; exit 2; }
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
go build -o "$BIN/goverbs-host" ./cmd/goverbs || exit 1
go build -tags rdmacore -ldflags=-s -o "$BIN/goverbs" ./cmd/goverbs || exit 1
for ex in 01-connection 04-write-to-persistent; do
	go build -o "$BIN/$ex-host" ./examples/rpma/$ex || exit 1
	go build -tags rdmacore -ldflags=-s -o "$BIN/$ex" ./examples/rpma/$ex || exit 1
done
"$LAB" status >/dev/null 2>&1 && TIMEOUT=20 "$LAB" exec true >/dev/null 2>&1 || {
	echo "vmlab is not running: $LAB build && $LAB start"; exit 1; }
push() { # LOCAL GUEST, in chunks (vmlab's push passes the file as one argument)
	local c
	gzip -c "$1" | base64 -w0 | split -b 100000 - "$BIN/chunk."
	"$LAB" exec "rm -f '$2.b64'" >/dev/null || return 1
	for c in "$BIN"/chunk.*; do "$LAB" exec "echo -n '$(cat "$c")' >> '$2.b64'" >/dev/null || return 1; done
	rm -f "$BIN"/chunk.*
	"$LAB" exec "base64 -d '$2.b64' | gunzip > '$2' && rm -f '$2.b64' && chmod +x '$2'" >/dev/null
}
push "$BIN/goverbs" /root/goverbs-rc || { echo "push failed"; exit 1; }
for ex in 01-connection 04-write-to-persistent; do
	push "$BIN/$ex" /root/goverbs-rc-$ex || { echo "push failed"; exit 1; }
done
G=/root/goverbs-rc H=$BIN/goverbs-host
pass=0 fail=0
check() { # NAME OUTPUT PATTERN...: every pattern must be in OUTPUT
	local name=$1 out=$2 ok=1 p; shift 2
	for p in "$@"; do echo "$out" | grep -q -- "$p" || ok=0; done
	if [ $ok = 1 ]; then pass=$((pass+1)); echo "PASS $name"; else fail=$((fail+1)); echo "FAIL $name"; echo "$out" | sed 's/^/    /' | tail -12; fi
}
port=$((7400 + RANDOM % 500))
# guest_server NAME GUESTCMD HOSTCMD PATTERN...: the guest waits, the host connects.
guest_server() {
	local name=$1 gcmd=$2 hcmd=$3; shift 3
	port=$((port+1))
	( TIMEOUT=150 "$LAB" exec "timeout 120 ${gcmd//PORT/$port} 2>&1" > "$BIN/srv" 2>&1 & )
	sleep 8 # the guest (TCG) takes a while to start a process
	local out; out=$("$LAB" host "timeout 100 ${hcmd//PORT/$port} 2>&1")
	sleep 3
	check "$name" "$out
--- server:
$(cat "$BIN/srv")" "$@"
}
host_server() {
	local name=$1 hcmd=$2 gcmd=$3; shift 3
	port=$((port+1))
	( "$LAB" host "timeout 120 ${hcmd//PORT/$port} 2>&1" > "$BIN/srv" 2>&1 & )
	sleep 2
	local out; out=$(TIMEOUT=150 "$LAB" exec "timeout 100 ${gcmd//PORT/$port} 2>&1")
	sleep 2
	check "$name" "$out
--- server:
$(cat "$BIN/srv")" "$@"
}
ping="ping -C 5 -V -v -d"
guest_server "ping host iwarp0 -> guest siw0" "$G $ping -s -a 10.77.0.2 -p PORT" "$H $ping -c -a 10.77.0.2 -p PORT" \
	"over iwarp0" "(siw0)" "client disconnected after 5 pings"
host_server "ping guest siw0 -> host iwarp0" "$H $ping -s -a 10.77.0.1 -p PORT" "$G $ping -c -a 10.77.0.1 -p PORT" \
	"over siw0" "(iwarp0)" "client disconnected after 5 pings"
host_server "ping guest rxe0 -> host roce" "$H $ping -s -a roce://10.78.0.1 -p PORT" "$G $ping -c -a 10.78.0.1 -p PORT" \
	"over rxe0" "(roce" "client disconnected after 5 pings"
guest_server "ping host roce -> guest rxe0" "$G $ping -s -a 10.78.0.2 -p PORT" "$H $ping -c -a roce://10.78.0.2 -p PORT" \
	"over roce" "(rxe0)" "client disconnected after 5 pings"
row='^ *65536 *500 '
guest_server "perf -R write_bw host iwarp0 -> guest siw0" "$G perf write_bw -R -d siw0 --server -p PORT -n 500" \
	"$H perf write_bw -R 10.77.0.2 -p PORT -n 500" "device iwarp0" "device siw0" "$row"
host_server "perf -R write_bw guest siw0 -> host iwarp0" "$H perf write_bw -R --server -p PORT -n 500" \
	"$G perf write_bw -R -d siw0 10.77.0.1 -p PORT -n 500" "device siw0" "device iwarp0" "$row"
host_server "perf -R read_bw guest rxe0 -> host roce" "$H perf read_bw -R --server --bind 10.78.0.1 -p PORT -n 500" \
	"$G perf read_bw -R -d rxe0 10.78.0.1 -p PORT -n 500" "device rxe0" "provider roce" "$row"
guest_server "perf -R send_lat host roce -> guest rxe0" "$G perf send_lat -R -d rxe0 --server -p PORT -n 500" \
	"$H perf send_lat -R --bind 10.78.0.1 10.78.0.2 -p PORT -n 500" "provider roce" "device rxe0" '^ *2 *500 '
# goverbs' rpma examples: rdmacore on siw0 in the guest, iwarp0 on the host.
for ex in 01-connection 04-write-to-persistent; do
	want="Received a message: Hello"
	[ $ex = 04-write-to-persistent ] && want="New value: Hello world!"
	guest_server "rpma $ex host iwarp0 -> guest siw0" "/root/goverbs-rc-$ex server -a 10.77.0.2 -p PORT" \
		"$BIN/$ex-host client -a 10.77.0.2 -p PORT" "$want"
	host_server "rpma $ex guest siw0 -> host iwarp0" "$BIN/$ex-host server -a 10.77.0.1 -p PORT" \
		"/root/goverbs-rc-$ex client -a 10.77.0.1 -p PORT" "$want"
done
for d in rxe0 siw0; do
	out=$(TIMEOUT=200 "$LAB" exec "timeout 180 $G perf send_lat -d $d -n 1000 2>&1; timeout 180 $G perf write_bw -d $d -n 500 2>&1")
	check "perf over $d (guest loopback)" "$out" "device $d" '^ *2 *1000 ' "$row"
done
echo "$pass passed, $fail failed"
[ $fail = 0 ]
