#!/usr/bin/env bash
# Records goverbs' RoCEv2 traffic on loopback (tcpdump, root needed) while
# goverbs perf runs every operation over roce, and checks that Wireshark's
# InfiniBand dissector (tshark) decodes every datagram: no malformed frame,
# no expert warning, and each operation present.
#
#   interop/roce-capture.sh            (installs tcpdump and tshark if missing)
#   PCAP=/tmp/x.pcap interop/roce-capture.sh   keep the capture there
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
command -v tcpdump >/dev/null && command -v tshark >/dev/null ||
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q tcpdump tshark >/dev/null || exit 1
BIN=${BIN:-/tmp/goverbs-interop}
PCAP=${PCAP:-/tmp/goverbs-roce.pcap}
mkdir -p "$BIN"
go build -o "$BIN/goverbs" ./cmd/goverbs || exit 1
A=127.0.0.$((30 + RANDOM % 200))
# On loopback the kernel hands a GSO batch to tcpdump as one frame; the
# capture wants datagram by datagram, as a wire carries them.
export GOVERBS_ROCE_GSO=0

tcpdump -i lo -w "$PCAP" "udp port 4791 and host $A" >/dev/null 2>&1 &
dump=$!
sleep 1
for t in "send_lat -s 3000" "write_bw -s 10000 -n 50" "read_lat -s 5000" "atomic_lat" "send_bw -s 70000 -n 20"; do
	"$BIN/goverbs" perf $t -w 0 -n 20 -B "$A" >/dev/null 2>&1 || "$BIN/goverbs" perf $t -B "$A" >/dev/null || { echo "FAIL perf $t"; kill $dump; exit 1; }
done
sleep 0.5
kill $dump; wait $dump 2>/dev/null

dec() { tshark -r "$PCAP" -d udp.port==4791,infiniband "$@" 2>/dev/null; }
dec > "$PCAP.txt"
total=$(wc -l < "$PCAP.txt")
bad=$(dec -Y '_ws.malformed || _ws.expert.severity >= "warning" || !infiniband' | wc -l)
fail=0
[ "$total" -gt 0 ] || { echo "FAIL nothing captured"; fail=1; }
[ "$bad" = 0 ] || { echo "FAIL $bad of $total datagrams malformed or not decoded"; dec -Y '_ws.malformed || !infiniband' | head; fail=1; }
for op in "Send Only" "Send First" "Send Middle" "Send Last" "RDMA Write First" "RDMA Write Middle" "RDMA Write Last" \
	"RDMA Read Request" "RDMA Read Response First" "RDMA Read Response Last" "Fetch Add" "Atomic Acknowledge" \
	"Acknowledge" "CM: ConnectRequest" "CM: ConnectReply" "CM: ReadyToUse" "CM: DisconnectRequest" "CM: DisconnectReply"; do
	grep -q "$op" "$PCAP.txt" || { echo "FAIL no \"$op\" decoded"; fail=1; }
done
[ "$fail" = 0 ] && echo "PASS $total datagrams, every one decoded by tshark's InfiniBand dissector ($PCAP)"
exit $fail
