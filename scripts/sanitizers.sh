#!/usr/bin/env bash
# Runs the test suite under ThreadSanitizer and AddressSanitizer, each built in its
# own scratch path (.build-tsan, .build-asan), so neither disturbs the normal build:
#   scripts/sanitizers.sh                          # both
#   scripts/sanitizers.sh thread                   # one of them
#   scripts/sanitizers.sh address --filter ShoalSyncTests   # the rest goes to swift test
# The process tests run the `shoal` binary of the same build, so it is sanitized too.
# ConvergenceTests runs 1 000 cases here (SHOAL_CONVERGENCE_CASES) instead of 10 000, and
# SHOAL_SANITIZER names the sanitizer, so tests that measure memory know not to bound it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ $# -eq 0 ]; then
  kinds=(thread address)
else
  kinds=("$1")
  shift
fi
status=0
for kind in "${kinds[@]}"; do
  case "$kind" in
    thread) scratch=.build-tsan ;;
    address) scratch=.build-asan ;;
    *) echo "unknown sanitizer '$kind': thread or address" >&2; exit 2 ;;
  esac
  echo "== $kind sanitizer ($scratch)"
  started=$SECONDS
  swift build --build-tests --sanitize="$kind" --scratch-path "$scratch" 2>&1 | tail -1
  log="$scratch/sanitizer-tests.log"
  # halt_on_error: the first report ends the run, and the log keeps it.
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
    ASAN_OPTIONS="detect_leaks=0 halt_on_error=1 ${ASAN_OPTIONS:-}" \
    SHOAL_CONVERGENCE_CASES="${SHOAL_CONVERGENCE_CASES:-1000}" \
    SHOAL_SANITIZER="$kind" \
    swift test --skip-build --sanitize="$kind" --scratch-path "$scratch" "$@" > "$log" 2>&1 || true
  grep -E "^✘ |Test run with|WARNING: ThreadSanitizer|ERROR: AddressSanitizer|SUMMARY: " "$log" | head -40 || true
  if grep -qE "Test run with [0-9]+ tests? in [0-9]+ suites? passed" "$log" &&
     ! grep -qE "WARNING: ThreadSanitizer|ERROR: AddressSanitizer" "$log"; then
    echo "$kind sanitizer: clean, $((SECONDS - started)) s with the build"
  else
    echo "$kind sanitizer: FAILED after $((SECONDS - started)) s; the whole output is in $log" >&2
    status=1
  fi
done
exit "$status"
