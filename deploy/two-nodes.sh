#!/usr/bin/env bash
# Starts two Shoal nodes on loopback, joined to each other and both subscribed to
# the `cars` collection; Ctrl-C stops both. Data lives in a temporary directory
# unless SHOAL_DEMO_DATA names one.
#   deploy/two-nodes.sh
#   shoal exec --node 127.0.0.1:7471 "INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'blue'})"
#   shoal exec --node 127.0.0.1:7472 "SELECT * FROM cars"
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build --product shoal
bin="$(swift build --show-bin-path)/shoal"
data=${SHOAL_DEMO_DATA:-$(mktemp -d -t shoal-demo.XXXXXX)}
port_a=${SHOAL_PORT_A:-7471}
port_b=${SHOAL_PORT_B:-7472}
pids=()
stop() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "both nodes stopped; data kept in $data"
}
trap stop INT TERM EXIT
"$bin" run --data "$data/alpha" --name alpha --listen "127.0.0.1:$port_a" --peer "127.0.0.1:$port_b" \
  --subscribe "SELECT * FROM cars" --no-discovery &
pids+=($!)
"$bin" run --data "$data/beta" --name beta --listen "127.0.0.1:$port_b" --peer "127.0.0.1:$port_a" \
  --subscribe "SELECT * FROM cars" --no-discovery &
pids+=($!)
echo "alpha on 127.0.0.1:$port_a, beta on 127.0.0.1:$port_b (data in $data); Ctrl-C stops both"
echo "try: $bin exec --node 127.0.0.1:$port_a \"INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'blue'})\""
echo "     $bin exec --node 127.0.0.1:$port_b \"SELECT * FROM cars\""
wait
