#!/usr/bin/env bash
# The test command: installs what is missing, builds everything (the process
# tests run the real `shoal` binary), then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build --build-tests
swift test --skip-build "$@"
