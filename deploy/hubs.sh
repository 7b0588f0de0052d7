#!/usr/bin/env bash
# Two hubs on one PostgreSQL database and two devices on loopback: the hubs are one
# node of the mesh (ARCHITECTURE.md, "Hubs on PostgreSQL"); device A dials hub 1 first,
# device B hub 2, and each knows both, so either keeps syncing when one hub stops.
# PostgreSQL is a throwaway server (scripts/postgres.sh) unless SHOAL_STORE names a
# database; Ctrl-C stops everything. Data lives in a temporary directory unless
# SHOAL_DEMO_DATA names one.
#   deploy/hubs.sh
#   shoal exec --node 127.0.0.1:7481 "INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'blue'})"   # on device A
#   shoal exec --node 127.0.0.1:7482 "SELECT * FROM cars"                                           # on device B
#   shoal exec --node 127.0.0.1:7471 "SELECT * FROM cars"                                           # on hub 1
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build --product shoal
bin="$(swift build --show-bin-path)/shoal"
data=${SHOAL_DEMO_DATA:-$(mktemp -d -t shoal-hubs.XXXXXX)}
mkdir -p "$data"
store=${SHOAL_STORE:-}
own_server=false
if [[ -z "$store" ]]; then
  store=$(scripts/postgres.sh start "$data/postgres" | sed -n 's/^SHOAL_POSTGRES_URL=//p')
  own_server=true
fi
pids=()
stop() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if $own_server; then scripts/postgres.sh stop "$data/postgres" || true; fi
  echo "stopped; data kept in $data"
}
trap stop INT TERM EXIT
for n in 1 2; do
  "$bin" run --data "$data/hub$n" --name "hub$n" --listen "127.0.0.1:747$n" --store "$store" \
    --subscribe "SELECT * FROM cars" --no-discovery &
  pids+=($!)
done
"$bin" run --data "$data/device-a" --name device-a --listen 127.0.0.1:7481 --no-discovery \
  --peer 127.0.0.1:7471 --peer 127.0.0.1:7472 --subscribe "SELECT * FROM cars" &
pids+=($!)
"$bin" run --data "$data/device-b" --name device-b --listen 127.0.0.1:7482 --no-discovery \
  --peer 127.0.0.1:7472 --peer 127.0.0.1:7471 --subscribe "SELECT * FROM cars" &
pids+=($!)
shown=$store
$own_server || shown="the database SHOAL_STORE names"
echo "hubs on 127.0.0.1:7471 and :7472 (one node, on $shown), devices on :7481 and :7482; Ctrl-C stops all"
echo "try: $bin exec --node 127.0.0.1:7481 \"INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'blue'})\""
echo "     $bin exec --node 127.0.0.1:7482 \"SELECT * FROM cars\""
echo "     pkill -9 -f -- '--name hub1', write again: the devices go on through hub 2"
wait
