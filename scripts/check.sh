#!/usr/bin/env bash
# The convergence checker at length (docs/RELIABILITY.md, "The convergence checker"):
# runs of shoal-check one after the other for MINUTES (default 60), each with a random
# seed (printed) and a random size, topology and duration, every operation and fault
# unless SHOAL_CHECK_ARGS says otherwise; or, given SEEDS, each of those once.
#   scripts/check.sh [MINUTES] [SEEDS...]
#   SHOAL_CHECK_ARGS="--faults link,kill --ops upsert,counter" scripts/check.sh 30
#   SHOAL_CHECK_ARGS="--hubs 2" scripts/check.sh 30   # with two hubs on a PostgreSQL it starts
# A failing run keeps its directory (the nodes' logs and history.txt) and its replay
# line; the script goes on and exits 1 at the end if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
minutes=${1:-60}
shift || true
swift build -c release --product shoal
swift build -c release --product shoal-check
check=.build/release/shoal-check
extra=(${SHOAL_CHECK_ARGS:-})
# Hubs need a PostgreSQL server: a throwaway one unless SHOAL_POSTGRES_URL names one.
if [[ " ${extra[*]} " == *" --hubs"* && -z "${SHOAL_POSTGRES_URL:-}" ]]; then
  postgres_dir=$(mktemp -d -t shoal-postgres.XXXXXX)
  trap 'scripts/postgres.sh stop "$postgres_dir"; rm -rf "$postgres_dir"' EXIT
  if ! started=$(scripts/postgres.sh start "$postgres_dir"); then
    echo "check.sh: --hubs needs a PostgreSQL server, and none could be started (scripts/postgres.sh says why above)" >&2
    exit 1
  fi
  export "${started?}"
  echo "check.sh: PostgreSQL for the hubs at $SHOAL_POSTGRES_URL"
fi
failed=()
runs=0
one() {
  runs=$((runs + 1))
  if ! "$check" "$@" "${extra[@]}"; then failed+=("$*"); fi
}
if [ $# -gt 0 ]; then
  for seed in "$@"; do one --seed "$seed" --duration 120; done
else
  end=$((SECONDS + minutes * 60))
  while [ $SECONDS -lt $end ]; do
    seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
    nodes=$((3 + RANDOM % 4))
    duration=$((60 + RANDOM % 240))
    echo "check.sh: run $((runs + 1)), seed $seed, $nodes nodes, ${duration} s"
    one --seed "$seed" --nodes "$nodes" --duration "$duration"
  done
fi
echo "check.sh: $runs runs, ${#failed[@]} failed"
for args in "${failed[@]}"; do echo "check.sh: failed: shoal-check $args ${extra[*]}"; done
[ ${#failed[@]} -eq 0 ]
