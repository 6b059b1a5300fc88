#!/bin/bash
# rdmacore-interop.sh - goverbs on the real devices of the lab VM's
# guest (provider rdmacore, built with -tags rdmacore) against goverbs'
# pure-Go providers on the host, both directions:
#   iwarp0 (host, iWARP over TCP)  <->  siw0 (guest, kernel siw via rdma_cm)
#   roce   (host, RoCEv2 over UDP)  <->  rxe0 (guest, kernel rxe via rdma_cm)
# with goverbs ping (rping's protocol, -V), goverbs perf -R (perftest's
# rdma_cm protocol) and the rpma examples 01 and 04 (over siw0), and goverbs
# perf over rxe0 and siw0 inside the guest (14 cases); then goverbs' rpma
# examples 03, 04, 05 and 09 against librpma's own, both in the guest, over
# rxe0 and over siw0, each role on each side (16 cases): neither device
# has native FLUSH (rdma-core 44), so both sides register flush targets for
# remote read and flush by a read after the writes, as librpma does.
# Exit status 0 only if every case passed. Env: VMLAB (the lab's vmlab.sh),
# RPMA_SRC (a checkout of github.com/pmem/rpma, whose examples are built
# here against the host's librpma-dev and libprotobuf-c-dev, as
# interop/rpma.sh does), PORT (the first of the ports the cases use, 40 of
# them; random in 7400-7899 by default), CASES (an extended regular
# expression: only the cases whose names match run).
set -uo pipefail
cd "$(dirname "$0")/.."
LAB=${VMLAB:-../shared/vmlab/vmlab.sh}
[ -x "$LAB" ] || { echo "$0: no lab at $LAB: set VMLAB to the lab's vmlab.sh (see README.md, the interop scripts)" >&2; exit 2; }
RPMA_SRC=${RPMA_SRC:?set RPMA_SRC to a checkout of github.com/pmem/rpma (its examples are built, as interop/rpma.sh does)}
BIN=$(mktemp -d)
srv=""
trap '[ -n "$srv" ] && kill $srv; rm -rf "$BIN"' EXIT
go build -o "$BIN/goverbs-host" ./cmd/goverbs || exit 1
go build -tags rdmacore -ldflags=-s -o "$BIN/goverbs" ./cmd/goverbs || exit 1
for ex in 01-connection 04-write-to-persistent; do
	go build -o "$BIN/$ex-host" ./examples/rpma/$ex || exit 1
done
RPMA_EX="03-read-to-persistent 04-write-to-persistent 05-flush-to-persistent 09-flush-to-persistent-GPSPM"
for ex in 01-connection $RPMA_EX; do
	go build -tags rdmacore -ldflags=-s -o "$BIN/$ex" ./examples/rpma/$ex || exit 1
done
# librpma's examples, as interop/rpma.sh builds them.
cx=$RPMA_SRC/examples
for c in $RPMA_EX; do
	extra=$cx/common/common-hello.c
	case $c in 09*) extra="$extra $cx/common/gpspm/GPSPM_flush.pb-c.c -I$cx/common/gpspm -lprotobuf-c" ;; esac
	for side in server client; do
		gcc -O1 -w -I"$cx/common" -o "$BIN/librpma-$c-$side" "$cx/$c/$side.c" \
			"$cx/common/common-conn.c" "$cx/common/common-utils.c" $extra -lrpma -libverbs -lrdmacm || exit 1
	done
done
# The guest has librpma but not protobuf-c (example 09): lend it the host's.
cp "$(readlink -f /usr/lib/x86_64-linux-gnu/libprotobuf-c.so.1)" "$BIN/libprotobuf-c.so.1" || exit 1
"$LAB" status >/dev/null 2>&1 && TIMEOUT=20 "$LAB" exec true >/dev/null 2>&1 || {
	echo "vmlab is not running: $LAB build && $LAB start"; exit 1; }
port=${PORT:-$((7400 + RANDOM % 500))}
# The guest fetches the binaries over the lab's network from a web server
# on the host side (one exec per file instead of one per 100 kB chunk).
http=$((port+39))
srv=$("$LAB" host "cd '$BIN' && { setsid python3 -m http.server $http --bind 10.77.0.1 >/dev/null 2>&1 < /dev/null & echo \$!; }")
for _ in $(seq 50); do "$LAB" host "ss -ltn | grep -q '10.77.0.1:$http '" && break; sleep 0.2; done
# The guest's python3 has no http module: a plain HTTP/1.0 GET.
cat > "$BIN/fetch.py" <<'PY'
import socket, sys
host, port, name, dst = sys.argv[1:5]
s = socket.create_connection((host, int(port)))
s.sendall(b"GET /" + name.encode() + b" HTTP/1.0\r\n\r\n")
b = bytearray()
while d := s.recv(1 << 16):
    b += d
head, _, body = bytes(b).partition(b"\r\n\r\n")
if not head.startswith(b"HTTP/1.0 200"):
    sys.exit("fetch %s: %r" % (name, head[:60]))
open(dst, "wb").write(body)
PY
"$LAB" push "$BIN/fetch.py" /root/gv-fetch.py >/dev/null || { echo "push failed"; exit 1; }
push() { # FILE (in $BIN) GUEST
	"$LAB" exec "python3 /root/gv-fetch.py 10.77.0.1 $http '$(basename "$1")' '$2' && chmod +x '$2'" >/dev/null
}
"$LAB" exec 'mkdir -p /root/lib' >/dev/null
push "$BIN/goverbs" /root/goverbs-rc || { echo "push failed"; exit 1; }
for ex in 01-connection $RPMA_EX; do
	push "$BIN/$ex" /root/goverbs-rc-$ex || { echo "push failed"; exit 1; }
done
for f in "$BIN"/librpma-*; do
	push "$f" "/root/$(basename "$f")" || { echo "push failed"; exit 1; }
done
push "$BIN/libprotobuf-c.so.1" /root/lib/libprotobuf-c.so.1 || { echo "push failed"; exit 1; }
kill $srv; srv=""
G=/root/goverbs-rc H=$BIN/goverbs-host
pass=0 fail=0
selected() { [ -z "${CASES:-}" ] || echo "$1" | grep -Eq -- "$CASES"; }
check() { # NAME OUTPUT PATTERN...: every pattern must be in OUTPUT
	local name=$1 out=$2 ok=1 p; shift 2
	for p in "$@"; do echo "$out" | grep -q -- "$p" || ok=0; done
	if [ $ok = 1 ]; then pass=$((pass+1)); echo "PASS $name"; else fail=$((fail+1)); echo "FAIL $name"; echo "$out" | sed 's/^/    /' | tail -12; fi
}
# guest_start GUESTCMD PORT: start a server in the guest, detached (an
# exec holds the lab's lock while it runs, and the lab is shared: a server
# started by a background exec starts only when the lock is free, which
# may be after its client gave up), and wait until the kernel's rdma_cm
# has its listener on PORT (a guest under TCG, on a busy host, may take
# several seconds). guest_log: its output, once it ended or was ended.
guest_start() {
	"$LAB" exec "cd /root && (LD_LIBRARY_PATH=/root/lib timeout 150 $1 > /tmp/gv-srv.log 2>&1 < /dev/null &
		echo \$! > /tmp/gv-srv.pid)
		for i in \$(seq 60); do rdma res show cm_id | grep -q 'state LISTEN .*:$2 ' && exit 0; sleep 0.5; done; exit 1" >/dev/null
}
guest_log() { "$LAB" exec 'kill $(cat /tmp/gv-srv.pid) 2>/dev/null; cat /tmp/gv-srv.log'; }
# guest_server NAME GUESTCMD HOSTCMD PATTERN...: the guest waits, the host connects.
guest_server() {
	local name=$1 gcmd=$2 hcmd=$3; shift 3
	port=$((port+1))
	selected "$name" || return 0
	guest_start "${gcmd//PORT/$port}" $port
	local out; out=$("$LAB" host "timeout 100 ${hcmd//PORT/$port} 2>&1")
	sleep 3
	check "$name" "$out
--- server:
$(guest_log)" "$@"
}
host_server() {
	local name=$1 hcmd=$2 gcmd=$3; shift 3
	port=$((port+1))
	selected "$name" || return 0
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
	selected "perf over $d (guest loopback)" || continue
	out=$(TIMEOUT=200 "$LAB" exec "timeout 180 $G perf send_lat -d $d -n 1000 2>&1; timeout 180 $G perf write_bw -d $d -n 500 2>&1")
	check "perf over $d (guest loopback)" "$out" "device $d" '^ *2 *1000 ' "$row"
done
# guest_pair NAME SERVERCMD CLIENTCMD PATTERN...: both in the guest.
guest_pair() {
	local name=$1 scmd=$2 ccmd=$3; shift 3
	port=$((port+1))
	selected "$name" || return 0
	guest_start "${scmd//PORT/$port}" $port
	local out; out=$(TIMEOUT=150 "$LAB" exec "cd /root && LD_LIBRARY_PATH=/root/lib timeout 120 ${ccmd//PORT/$port} 2>&1")
	sleep 2
	check "$name" "$out
--- server:
$(guest_log)" "$@"
}
# goverbs' rpma examples (rdmacore) against librpma's, both roles, in the guest.
for d in rxe0:10.78.0.2 siw0:10.77.0.2; do
	dev=${d%%:*} ip=${d#*:}
	for ex in $RPMA_EX; do
		want_s="New value: Hello world!" want_c="Translation: ¡Hola Mundo!"
		[ $ex = 09-flush-to-persistent-GPSPM ] && want_s="op_context: 0xF01D}"
		guest_pair "rpma $ex over $dev: librpma server <- goverbs client" "./librpma-$ex-server $ip PORT" \
			"./goverbs-rc-$ex client -a $ip -p PORT" "$want_s" "$want_c"
		guest_pair "rpma $ex over $dev: goverbs server <- librpma client" "./goverbs-rc-$ex server -a $ip -p PORT" \
			"./librpma-$ex-client $ip PORT" "$want_s" "$want_c"
	done
done
echo "$pass passed, $fail failed"
[ $fail = 0 ]
