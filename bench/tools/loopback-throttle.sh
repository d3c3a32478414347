#!/usr/bin/env bash
# Copied unchanged below these three lines from the workplace's ../shared/tools/loopback-throttle.sh (2026-12-01, sha256
# b5bd996a0d507551...), so that the repository carries what bench/emulate.py runs.
# Emulate a node's network on one host: cap the loopback interface with a token-bucket filter, so NCCL forced
# onto sockets (NCCL_NET=Socket NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1) between local GPUs sees e.g. 40 Gbps.
#
#   bash loopback-throttle.sh fetch DIR      # on this machine: download Debian's tc (iproute2) into DIR
#   bash loopback-throttle.sh on DIR 40gbit  # on the GPU machine (root): cap lo; carry DIR there
#   bash loopback-throttle.sh off DIR        # remove the cap
#
# The GPU machine has no `tc` and no package registry; DIR carries the binary and its libraries (about 1.6 MB).
# Measured on an H200 machine (4 TCP streams over lo): 13.5 GB/s uncapped, 4.98 GB/s at 40gbit, 2.0 at 16gbit.
set -euo pipefail
cmd=${1:?fetch|on|off}; dir=${2:?DIR}
case "$cmd" in
  fetch)
    mkdir -p "$dir" && cd "$dir"
    apt-get download iproute2 libbpf1 libelf1 libmnl0 libcap2 libxtables12 libbsd0 libmd0
    for f in *.deb; do dpkg -x "$f" root; done
    rm -f ./*.deb
    echo "tc in $dir/root/sbin/tc" ;;
  on|off)
    root=$(cd "$dir" && pwd)/root
    export LD_LIBRARY_PATH="$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "$root/sbin/tc" qdisc del dev lo root 2>/dev/null || true
    if [ "$cmd" = on ]; then
      rate=${3:?RATE, e.g. 40gbit}
      "$root/sbin/tc" qdisc add dev lo root tbf rate "$rate" burst 8mb latency 100ms
      "$root/sbin/tc" qdisc show dev lo
    fi ;;
  *) echo "usage: $0 fetch|on|off DIR [RATE]" >&2; exit 2 ;;
esac
