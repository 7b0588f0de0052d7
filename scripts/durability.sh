#!/usr/bin/env bash
# The durability loop at length: SIGKILLs a node at a random moment of heavy local
# writes and incoming sync, CYCLES times (default 100), checking after each kill that
# every acknowledged transaction is there whole, then that sync completes
# (DurabilityTests; CI runs the same test with 3 cycles):
#   scripts/durability.sh [CYCLES]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build --build-tests
SHOAL_DURABILITY_CYCLES=${1:-100} swift test --skip-build --filter DurabilityTests 2>&1 | tee .build/durability.log |
  grep -E "durability:|✘|passed after|failed after"
