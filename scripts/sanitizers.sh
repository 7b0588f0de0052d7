#!/usr/bin/env bash
# Runs the test suite under ThreadSanitizer and AddressSanitizer, each built in its
# own scratch path (.build-tsan, .build-asan), so neither disturbs the normal build:
#   scripts/sanitizers.sh              # both
#   scripts/sanitizers.sh thread       # one of them
# Extra arguments after the sanitizer go to `swift test` (e.g. --filter ShoalSyncTests).
# The process tests run the `shoal` binary of the same build, so it is sanitized too.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
kinds=("${1:-thread}")
[ $# -eq 0 ] && kinds=(thread address)
[ $# -gt 0 ] && shift
status=0
for kind in "${kinds[@]}"; do
  case "$kind" in
    thread) scratch=.build-tsan ;;
    address) scratch=.build-asan ;;
    *) echo "unknown sanitizer '$kind': thread or address" >&2; exit 2 ;;
  esac
  echo "== $kind sanitizer ($scratch)"
  swift build --build-tests --sanitize="$kind" --scratch-path "$scratch"
  # halt_on_error: the first report fails the run, with the report in the log.
  if TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
     ASAN_OPTIONS="detect_leaks=0 halt_on_error=1 ${ASAN_OPTIONS:-}" \
     SHOAL_CONVERGENCE_CASES="${SHOAL_CONVERGENCE_CASES:-1000}" \
     swift test --skip-build --sanitize="$kind" --scratch-path "$scratch" "$@" 2>&1 | tee "$scratch/sanitizer-tests.log" |
     grep -E "^(✘|✔ Test run|✘ Test run)|WARNING: ThreadSanitizer|ERROR: AddressSanitizer|SUMMARY:"; then :; fi
  if ! grep -qE "✔ Test run with [0-9]+ tests? in [0-9]+ suites? passed" "$scratch/sanitizer-tests.log" ||
     grep -qE "WARNING: ThreadSanitizer|ERROR: AddressSanitizer" "$scratch/sanitizer-tests.log"; then
    echo "$kind sanitizer: FAILED (see $scratch/sanitizer-tests.log)" >&2
    status=1
  else
    echo "$kind sanitizer: clean"
  fi
done
exit "$status"
