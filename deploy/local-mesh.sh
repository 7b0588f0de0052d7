#!/usr/bin/env bash
# Starts N Shoal nodes on 127.0.0.1 joined into one mesh; Ctrl-C stops them all.
#   deploy/local-mesh.sh 3
# Node i (1..N) is node-i, listens on 127.0.0.1:$((SHOAL_BASE_PORT + i)) (7470 + i by
# default) and keeps its data in $SHOAL_DEMO_DATA/node-i (a new temporary directory
# unless SHOAL_DEMO_DATA is set). Each node reads a config file written there,
# shoal.toml. The nodes find each other by LAN discovery on the loopback interface
# only (discovery-interface = "lo": multicast TTL 0, nothing leaves the machine), and
# each also dials node-1 as a static peer. Every node subscribes to SHOAL_SUBSCRIBE
# ("SELECT * FROM cars" by default).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-3}
[[ "$count" =~ ^[1-9][0-9]*$ ]] || { echo "usage: deploy/local-mesh.sh N   (N nodes, N >= 1)" >&2; exit 2; }
scripts/setup.sh
swift build --product shoal >&2
bin="$(swift build --show-bin-path)/shoal"
data=${SHOAL_DEMO_DATA:-$(mktemp -d -t shoal-mesh.XXXXXX)}
base=${SHOAL_BASE_PORT:-7470}
query=${SHOAL_SUBSCRIBE:-SELECT * FROM cars}
pids=()
stop() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "all $count nodes stopped; data kept in $data"
}
trap stop INT TERM EXIT
for i in $(seq 1 "$count"); do
  dir="$data/node-$i"
  mkdir -p "$dir"
  {
    echo "# written by deploy/local-mesh.sh"
    echo "data = \"db\""
    echo "name = \"node-$i\""
    echo "listen = \"127.0.0.1:$((base + i))\""
    echo "mesh = \"local-mesh\""
    echo "discovery-interface = \"lo\""
    echo "subscribe = [\"${query//\"/\\\"}\"]"
    if [ "$i" -gt 1 ]; then echo "peer = [\"127.0.0.1:$((base + 1))\"]"; fi
  } > "$dir/shoal.toml"
  "$bin" run --config "$dir/shoal.toml" 2> >(sed -u "s/^/[node-$i] /" >&2) &
  pids+=($!)
done
echo "$count nodes on 127.0.0.1:$((base + 1))..$((base + count)) (data in $data); Ctrl-C stops them"
echo "try: $bin exec --node 127.0.0.1:$((base + 1)) \"INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'blue'})\""
echo "     $bin exec --node 127.0.0.1:$((base + count)) \"SELECT * FROM cars\""
echo "     $bin status --node 127.0.0.1:$((base + count))"
wait
