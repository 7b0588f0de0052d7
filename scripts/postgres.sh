#!/usr/bin/env bash
# A throwaway PostgreSQL server for Shoal's tests: on 127.0.0.1, on a free port, in a
# directory of its own, with one database `shoal` and trust for local connections only.
#
#   scripts/postgres.sh start DIR   installs PostgreSQL from Debian's packages if it is
#                                   missing, starts a server in DIR and prints the line
#                                   SHOAL_POSTGRES_URL=postgresql://shoal@127.0.0.1:PORT/shoal
#   scripts/postgres.sh stop DIR    stops it (DIR may then be removed)
#   scripts/postgres.sh crash DIR   stops it at once, as a crash would (`-m immediate`)
#   scripts/postgres.sh resume DIR  starts it again on its port (scripts/hub-restart.sh)
#
# Tests that need PostgreSQL read SHOAL_POSTGRES_URL and skip, saying so, without it;
# the role may create databases, so each test makes one of its own.
# scripts/test.sh starts one before the tests and stops it at the end; scripts/check.sh
# and .ci/run start one for the convergence checker's hubs.
set -euo pipefail
command=${1:-}
dir=${2:-}
if [[ -z "$command" || -z "$dir" ]]; then
  echo "usage: $0 start|stop|crash|resume DIR" >&2
  exit 2
fi

bin() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [[ -n "$found" ]] && echo "$found"
}

# PostgreSQL refuses to run as root: as root, the server runs as the `postgres` user
# the Debian package creates.
as_server() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# Loopback only, the socket in DIR (not /var/run), no fsync: a test server, not a store.
# The suite runs many hubs' pools at once (each hub also holds a listening connection,
# and each pool opens up to 20): the whole suite has reached 297 connections at once
# when its suites start together (sampled from pg_stat_activity every 200 ms on
# 2026-11-30), and CI failed at 300 with "remaining connection slots are reserved".
serve() {
  as_server "$1/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
    -o "-c listen_addresses=127.0.0.1 -p $2 -k $dir -c fsync=off -c full_page_writes=off -c max_connections=1000" >/dev/null || {
    cat "$dir/server.log" >&2
    exit 1
  }
}

case "$command" in
start)
  if [[ -z "$(bin)" ]]; then
    echo "postgres.sh: installing PostgreSQL from Debian's packages" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq postgresql >/dev/null
  fi
  pgbin=$(bin) || { echo "postgres.sh: PostgreSQL is not installed and could not be" >&2; exit 1; }
  mkdir -p "$dir"
  [[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as_server "$pgbin/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    exit 1
  }
  serve "$pgbin" "$port"
  as_server "$pgbin/psql" -h 127.0.0.1 -p "$port" -U postgres -q -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE shoal LOGIN CREATEDB" -c "CREATE DATABASE shoal OWNER shoal" >/dev/null
  echo "$port" >"$dir/port"
  echo "SHOAL_POSTGRES_URL=postgresql://shoal@127.0.0.1:$port/shoal"
  ;;
stop)
  pgbin=$(bin) || exit 0
  [[ -d "$dir/data" ]] || exit 0
  as_server "$pgbin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  ;;
crash)
  as_server "$(bin)/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
  ;;
resume)
  serve "$(bin)" "$(cat "$dir/port")"
  ;;
*)
  echo "usage: $0 start|stop|crash|resume DIR" >&2
  exit 2
  ;;
esac
