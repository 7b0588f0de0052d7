#!/usr/bin/env bash
# The test command: installs what is missing, builds everything (the process
# tests run the real `shoal` binary), starts a throwaway PostgreSQL server for the
# hub tests unless SHOAL_POSTGRES_URL names one (scripts/postgres.sh; without either
# those tests say they are skipped), then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build --build-tests
if [[ -z "${SHOAL_POSTGRES_URL:-}" ]]; then
  postgres_dir=$(mktemp -d -t shoal-postgres.XXXXXX)
  trap 'scripts/postgres.sh stop "$postgres_dir"; rm -rf "$postgres_dir"' EXIT
  if started=$(scripts/postgres.sh start "$postgres_dir"); then
    export "${started?}"
    echo "test.sh: PostgreSQL for the hub tests at $SHOAL_POSTGRES_URL"
  else
    echo "test.sh: no PostgreSQL server could be started; the hub tests are skipped"
  fi
fi
swift test --skip-build "$@"
