#!/usr/bin/env bash
# A small LAN made of network namespaces joined by a bridge, one Shoal node in each,
# finding each other by LAN discovery over real (virtual) interfaces; no --peer.
#   sudo deploy/netns-mesh.sh [N]          # N nodes (3 by default); Ctrl-C stops them
#   sudo deploy/netns-mesh.sh --check [N]  # start, check that a write crosses, stop
# Namespace shoal-hub holds the bridge; shoal-node-i holds node i at 10.77.0.i/24 on
# its veth, attached to the bridge. Everything lives in namespaces this script makes
# and removes: no packet reaches the machine's own interfaces. Needs root and
# iproute2 (ip netns); where namespaces cannot be made it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
count=${1:-3}
[[ "$count" =~ ^[1-9][0-9]?$ ]] && [ "$count" -ge 2 ] && [ "$count" -le 50 ] \
  || { echo "usage: deploy/netns-mesh.sh [--check] [N]   (2 <= N <= 50)" >&2; exit 2; }
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
  echo "netns-mesh: skipped: needs root and iproute2 (ip netns) to make network namespaces" >&2
  exit 0
fi
probe="shoal-probe-$$"
if ! ip netns add "$probe" 2>/dev/null; then
  echo "netns-mesh: skipped: this machine does not allow network namespaces (ip netns add failed)" >&2
  exit 0
fi
ip netns del "$probe"
scripts/setup.sh
swift build --product shoal >&2
bin="$(swift build --show-bin-path)/shoal"
data=$(mktemp -d -t shoal-netns.XXXXXX)
mesh="netns-demo"
pids=()
cleanup() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for i in $(seq 1 "$count"); do ip netns del "shoal-node-$i" 2>/dev/null || true; done
  ip netns del shoal-hub 2>/dev/null || true
  echo "netns-mesh: nodes stopped, namespaces removed; logs and data in $data"
}
trap cleanup INT TERM EXIT

ip netns add shoal-hub
ip -n shoal-hub link add br0 type bridge
ip -n shoal-hub link set br0 up
for i in $(seq 1 "$count"); do
  ns="shoal-node-$i"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "veth$i" netns "$ns" type veth peer name "port$i" netns shoal-hub
  ip -n shoal-hub link set "port$i" master br0 up
  ip -n "$ns" addr add "10.77.0.$i/24" dev "veth$i"
  ip -n "$ns" link set "veth$i" up
  # No --peer and no --discovery-interface: the node uses every multicast-capable
  # interface it sees, which inside its namespace is its veth only.
  ip netns exec "$ns" "$bin" run --data "$data/node-$i" --listen 0.0.0.0:7470 --name "node-$i" --mesh "$mesh" \
    --subscribe "SELECT * FROM cars" > "$data/node-$i.log" 2>&1 &
  pids+=($!)
done
echo "netns-mesh: $count nodes at 10.77.0.1..10.77.0.$count:7470 in namespaces shoal-node-1..$count"

connected() { # node i: how many peers are connected
  ip netns exec "shoal-node-$1" "$bin" status --node 127.0.0.1:7470 --json 2>/dev/null \
    | grep -o '"state":"connected"' | wc -l
}
deadline=$((SECONDS + 30))
until [ "$(connected 1)" -ge $((count - 1)) ] || [ $SECONDS -ge $deadline ]; do sleep 0.5; done
echo "netns-mesh: node-1 sees $(connected 1) of $((count - 1)) peers, found by discovery:"
ip netns exec shoal-node-1 "$bin" status --node 127.0.0.1:7470 | sed -n '/^Peers/,/^$/p'
ip netns exec shoal-node-1 "$bin" exec --node 127.0.0.1:7470 "INSERT INTO cars DOCUMENTS ({'_id': 'netns', 'color': 'green'})" >/dev/null
ok=0
for _ in $(seq 1 40); do
  if ip netns exec "shoal-node-$count" "$bin" exec --node 127.0.0.1:7470 "SELECT * FROM cars" | grep -q netns; then ok=1; break; fi
  sleep 0.5
done
if [ $ok -eq 1 ]; then
  echo "netns-mesh: a car written on node-1 reached node-$count across the bridge"
else
  echo "netns-mesh: the car written on node-1 did not reach node-$count; see $data/node-*.log" >&2
  [ $check -eq 1 ] && exit 1
fi
if [ $check -eq 1 ]; then exit 0; fi
echo "netns-mesh: try: sudo ip netns exec shoal-node-2 $bin status --node 127.0.0.1:7470; Ctrl-C stops everything"
wait
