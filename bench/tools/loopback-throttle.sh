#!/usr/bin/env bash
# Two emulated nodes on one host, each direction of the link between them capped at its own rate, as a NIC's
# figure holds in each direction at once: two network namespaces joined by a veth pair, a token-bucket filter on
# each end's egress (node0's caps node0 -> node1, node1's the other way).
#
#   bash loopback-throttle.sh fetch DIR            # on a machine with apt: Debian's ip and tc (iproute2) into DIR
#   bash loopback-throttle.sh on DIR 40gbit         # (root) namespaces rtnode0 (10.233.0.1), rtnode1 (10.233.0.2)
#   bash loopback-throttle.sh off DIR               # remove them
#   bash loopback-throttle.sh check DIR 4gbit 5     # on, then TCP both ways at once for 5 s, one way, off: JSON
#   bash loopback-throttle.sh check-lo DIR 4gbit 5  # the old way for comparison: tbf on one namespace's own lo
#
# DIR `-` uses the machine's own ip and tc. A 2-GPU run puts one Ray node in each namespace:
#   "$IP" netns exec rtnode0 env CUDA_VISIBLE_DEVICES=0 ray start --head --node-ip-address 10.233.0.1 ...
#   "$IP" netns exec rtnode1 env CUDA_VISIBLE_DEVICES=1 ray start --address 10.233.0.1:6379 --node-ip-address 10.233.0.2
# with NCCL_SOCKET_IFNAME=veth-rt (both ends' names start so) and NCCL_NET=Socket NCCL_P2P_DISABLE=1
# NCCL_SHM_DISABLE=1: Ray then sees two nodes of one GPU and the job's traffic crosses the capped veth.
#
# Why not tbf on lo (this script's first version): every loopback packet leaves through lo's one egress queue, so
# one cap is shared by both directions, and a ring collective, which sends and receives at once, got about half
# the rate each way. `check-lo` shows it. Measured on this repository's CPU machine: bench/results/throttle-*.jsonl.
set -euo pipefail
cmd=${1:?fetch|on|off|check|check-lo}; dir=${2:?DIR or -}
here=$(cd "$(dirname "$0")" && pwd)
NS0=rtnode0 NS1=rtnode1 IF0=veth-rt0 IF1=veth-rt1 ADDR0=10.233.0.1 ADDR1=10.233.0.2 PORT=52330

tools() {
  if [ "$dir" = - ]; then IP=ip TC=tc; return; fi
  local root; root=$(cd "$dir" && pwd)/root
  export LD_LIBRARY_PATH="$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  IP="$root/bin/ip" TC="$root/sbin/tc"
  [ -x "$IP" ] || IP="$root/sbin/ip"
}

# A bucket of 8 MB or 1/100 s at the rate, whichever is larger (tbf needs at least rate/HZ bytes to reach the rate).
cap() { # NAMESPACE DEVICE RATE
  "$IP" netns exec "$1" "$TC" qdisc replace dev "$2" root tbf rate "$3" burst 8mb latency 100ms
}

off() {
  for ns in "$NS0" "$NS1" rtlo; do "$IP" netns del "$ns" 2>/dev/null || true; done
}

on() { # RATE
  off
  "$IP" netns add "$NS0"; "$IP" netns add "$NS1"
  "$IP" link add "$IF0" netns "$NS0" type veth peer name "$IF1" netns "$NS1"
  "$IP" netns exec "$NS0" "$IP" addr add "$ADDR0/30" dev "$IF0"
  "$IP" netns exec "$NS1" "$IP" addr add "$ADDR1/30" dev "$IF1"
  for ns in "$NS0" "$NS1"; do "$IP" netns exec "$ns" "$IP" link set lo up; done
  "$IP" netns exec "$NS0" "$IP" link set "$IF0" up; "$IP" netns exec "$NS1" "$IP" link set "$IF1" up
  cap "$NS0" "$IF0" "$1"; cap "$NS1" "$IF1" "$1"
  for ns in "$NS0" "$NS1"; do "$IP" netns exec "$ns" "$TC" qdisc show dev "veth-rt${ns#rtnode}"; done
}

measure() { # LABEL SECONDS NS_A ADDR_A NS_B ADDR_B BOTH(1|0): TCP from A to B (and B to A if BOTH), 4 streams each
  local label=$1 seconds=$2 both=$7 py="python3 $here/two_way_throughput.py"
  "$IP" netns exec "$5" $py serve "$6" "$PORT" "$seconds" >"$tmp/b" & local serve_b=$!
  [ "$both" = 1 ] && { "$IP" netns exec "$3" $py serve "$4" $((PORT + 1)) "$seconds" >"$tmp/a" & }
  sleep 1  # the servers listen
  "$IP" netns exec "$3" $py send "$6" "$PORT" "$seconds" 100 4 & local send_a=$!
  [ "$both" = 1 ] && "$IP" netns exec "$5" $py send "$4" $((PORT + 1)) "$seconds" 100 4
  wait "$send_a" "$serve_b"; wait
  printf '{"measurement": "%s", "rate": "%s", "a_to_b": %s' "$label" "$rate" "$(cat "$tmp/b")"
  [ "$both" = 1 ] && printf ', "b_to_a": %s' "$(cat "$tmp/a")"
  printf '}\n'
}

tools
case "$cmd" in
  fetch)
    mkdir -p "$dir" && cd "$dir"
    apt-get download iproute2 libbpf1 libelf1 libmnl0 libcap2 libxtables12 libbsd0 libmd0
    for f in *.deb; do dpkg -x "$f" root; done
    rm -f ./*.deb
    echo "ip and tc in $dir/root" ;;
  on) on "${3:?RATE, e.g. 40gbit}" ;;
  off) off ;;
  check|check-lo)
    rate=${3:?RATE}; seconds=${4:-5}; tmp=$(mktemp -d); trap 'off; rm -rf "$tmp"' EXIT
    if [ "$cmd" = check ]; then
      on "$rate" >/dev/null
      measure "veth, both directions at once" "$seconds" "$NS0" "$ADDR0" "$NS1" "$ADDR1" 1
      measure "veth, one direction" "$seconds" "$NS0" "$ADDR0" "$NS1" "$ADDR1" 0
      "$IP" netns exec "$NS0" "$IP" link set "$IF0" down; "$IP" netns exec "$NS0" "$TC" qdisc del dev "$IF0" root
      "$IP" netns exec "$NS1" "$TC" qdisc del dev "$IF1" root; "$IP" netns exec "$NS0" "$IP" link set "$IF0" up
      sleep 1
      rate="uncapped" measure "veth, no cap, both directions" "$seconds" "$NS0" "$ADDR0" "$NS1" "$ADDR1" 1
    else
      off; "$IP" netns add rtlo; "$IP" netns exec rtlo "$IP" link set lo up; cap rtlo lo "$rate"
      measure "lo with one tbf, both directions at once" "$seconds" rtlo 127.0.0.1 rtlo 127.0.0.1 1
    fi ;;
  *) echo "usage: $0 fetch|on|off|check|check-lo DIR [RATE [SECONDS]]" >&2; exit 2 ;;
esac
