#!/bin/bash
# matched.sh BIN ROUNDS: alternate UCX posix tag_lat (2 processes), goverbs send_lat in one
# process and goverbs send_lat in two processes (8 B, warm-up 10000); prints p50 and mean of each
BIN=${1:-/tmp/gv}; R=${2:-6}
echo "# ucx_p50 ucx_mean | gv1_p50 gv1_mean | gv2_p50 gv2_mean | gv2p1_p50 gv2p1_mean (GOMAXPROCS=1)"
for i in $(seq $R); do
  port=$((20000+RANDOM%20000))
  UCX_TLS=posix,self ucx_perftest -p $port -w 10000 -n 200000 -f >/dev/null 2>&1 & sp=$!; sleep 0.4
  u=$(UCX_TLS=posix,self ucx_perftest -p $port -t tag_lat -s 8 -n 200000 -w 10000 -f localhost 2>/dev/null | awk 'NF==8 && $1 ~ /^[0-9]+$/ {print $2, $4}')
  wait $sp 2>/dev/null
  g=$($BIN perf send_lat -d shm0 -s 8 -n 100000 -w 10000 -json | sed -n 's/.*"t_typical_us":\([0-9.]*\).*"t_avg_us":\([0-9.]*\).*/\1 \2/p')
  port=$((20000+RANDOM%20000))
  $BIN perf send_lat -d shm0 -s 8 -n 100000 -w 10000 -p $port -server -json >/dev/null 2>&1 & sp=$!; sleep 0.3
  g2=$($BIN perf send_lat -d shm0 -s 8 -n 100000 -w 10000 -p $port -json x | sed -n 's/.*"t_typical_us":\([0-9.]*\).*"t_avg_us":\([0-9.]*\).*/\1 \2/p')
  wait $sp
  port=$((20000+RANDOM%20000))
  GOMAXPROCS=1 $BIN perf send_lat -d shm0 -s 8 -n 100000 -w 10000 -p $port -server -json >/dev/null 2>&1 & sp=$!; sleep 0.3
  g3=$(GOMAXPROCS=1 $BIN perf send_lat -d shm0 -s 8 -n 100000 -w 10000 -p $port -json x | sed -n 's/.*"t_typical_us":\([0-9.]*\).*"t_avg_us":\([0-9.]*\).*/\1 \2/p')
  wait $sp
  echo "$u | $g | $g2 | $g3"
done
