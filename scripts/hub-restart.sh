#!/usr/bin/env bash
# PostgreSQL crashing under load, with two hubs on it: nothing acknowledged is lost.
#
#   scripts/hub-restart.sh [ROUNDS]     (default 60; about 2 s a round)
#
# Starts a PostgreSQL server of its own (scripts/postgres.sh), two `shoal run --store`
# hubs on one database and a device behind each (each device given both hubs). Each
# round increments one counter three times through the CLI: on device 1, on device 2,
# and on hub 1. A third of the way in, the server is stopped as a crash would stop it
# (`pg_ctl stop -m immediate`) for 8 rounds, then started again; and again two thirds
# in. Increments that fail while it is down are expected (on hub 1); every increment
# the CLI acknowledged must then be counted exactly once on all four nodes, and those
# whose outcome the CLI called unknown (a hub's COMMIT whose answer was lost) once or
# not at all.
#
# Exits 0 when every node holds the acknowledged count (plus at most the unknown ones),
# 1 otherwise. Everything runs
# on 127.0.0.1; the processes and the server are stopped on exit, whatever happens.
set -u
cd "$(dirname "$0")/.."
rounds=${1:-60}
work=$(mktemp -d /tmp/shoal-hub-restart.XXXXXX)
chmod 755 "$work"  # the server runs as the postgres user when this runs as root
pgdir="$work/postgres"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
  scripts/postgres.sh stop "$pgdir" >/dev/null 2>&1
}
trap cleanup EXIT

swift build --product shoal >/dev/null || { echo "hub-restart: the build failed" >&2; exit 1; }
shoal=$(swift build --show-bin-path)/shoal
url=$(scripts/postgres.sh start "$pgdir" | sed -n 's/^SHOAL_POSTGRES_URL=//p')
[[ -n "$url" ]] || { echo "hub-restart: PostgreSQL did not start" >&2; exit 1; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
h1=$(free_port); h2=$(free_port); d1=$(free_port); d2=$(free_port)

start() {  # NAME PORT ARGS...
  local name=$1 port=$2
  shift 2
  "$shoal" run --data "$work/$name" --listen "127.0.0.1:$port" --no-discovery --subscribe "SELECT * FROM t" "$@" \
    >"$work/$name.log" 2>&1 &
  pids+=($!)
}
start hub1 "$h1" --store "$url"
start hub2 "$h2" --store "$url"
sleep 3
start device1 "$d1" --peer "127.0.0.1:$h1" --peer "127.0.0.1:$h2"
start device2 "$d2" --peer "127.0.0.1:$h2" --peer "127.0.0.1:$h1"
sleep 3
"$shoal" exec --node "127.0.0.1:$d1" "INSERT INTO COLLECTION t (hits COUNTER) DOCUMENTS ({'_id': 'c', 'hits': 0})" >/dev/null ||
  { echo "hub-restart: the first write failed" >&2; exit 1; }
sleep 2

acknowledged=0
unknown=0
declare -A failed=([device1]=0 [device2]=0 [hub1]=0)
increment() {  # NAME PORT
  local said status
  said=$("$shoal" exec --node "127.0.0.1:$2" \
    "UPDATE COLLECTION t (hits COUNTER) APPLY hits INCREMENT BY 1 WHERE _id = 'c'" 2>&1 >/dev/null)
  status=$?
  if [[ $status -eq 0 ]]; then
    acknowledged=$((acknowledged + 1))
  elif [[ $status -eq 3 ]]; then
    # The outcome is unknown (a hub's COMMIT whose answer was lost, or no answer at all): it may count once.
    echo "$said" >>"$work/failures.log"
    unknown=$((unknown + 1))
  else
    echo "$said" >>"$work/failures.log"
    failed[$1]=$((failed[$1] + 1))
  fi
}
down=()
for mark in $((rounds / 3)) $((2 * rounds / 3)); do down+=("$mark"); done
for round in $(seq 1 "$rounds"); do
  increment device1 "$d1"
  increment device2 "$d2"
  increment hub1 "$h1"
  for mark in "${down[@]}"; do
    if [[ $round -eq $mark ]]; then
      scripts/postgres.sh crash "$pgdir" && echo "round $round: PostgreSQL stopped as by a crash"
    elif [[ $round -eq $((mark + 8)) ]]; then
      scripts/postgres.sh resume "$pgdir" && echo "round $round: PostgreSQL started again"
    fi
  done
done
echo "acknowledged increments: $acknowledged; outcome unknown: $unknown; failed: ${failed[device1]} on device 1," \
  "${failed[device2]} on device 2, ${failed[hub1]} on hub 1 (a hub's own writes fail while its database is down; a device's should not)"

status=0
for node in "$d1" "$d2" "$h1" "$h2"; do
  hits=""
  for _ in $(seq 1 60); do
    hits=$("$shoal" exec --json --node "127.0.0.1:$node" "SELECT hits FROM t WHERE _id = 'c'" 2>/dev/null |
      python3 -c 'import sys, json; print(json.load(sys.stdin)["items"][0]["hits"])' 2>/dev/null)
    [[ "$hits" =~ ^[0-9]+$ && $hits -ge $acknowledged && $hits -le $((acknowledged + unknown)) ]] && break
    sleep 1
  done
  if [[ "$hits" =~ ^[0-9]+$ && $hits -ge $acknowledged && $hits -le $((acknowledged + unknown)) ]]; then
    echo "127.0.0.1:$node holds $hits: every acknowledged increment, once ($unknown of unknown outcome may count)"
  else
    echo "127.0.0.1:$node holds ${hits:-nothing readable}, not $acknowledged to $((acknowledged + unknown))" >&2
    status=1
  fi
done
cleanup
trap - EXIT
if [[ $status -eq 0 ]]; then rm -rf "$work"; else echo "logs in $work" >&2; fi
exit $status
