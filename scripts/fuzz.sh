#!/usr/bin/env bash
# Builds Shoal's libFuzzer targets (Tests/Fuzz, a package of their own, in
# .build-fuzz) and runs each for SECONDS (default 60):
#   scripts/fuzz.sh [SECONDS]
#   SHOAL_FUZZ_TARGETS="FuzzJSON FuzzDQL" scripts/fuzz.sh 300
# Each target starts from its committed seeds (Tests/Fuzz/Corpus/TARGET) and keeps
# what it finds in .build-fuzz/corpus/TARGET. A crash leaves its input in
# .build-fuzz/crashes/ and fails the script; reproduce it with
#   .build-fuzz/debug/TARGET .build-fuzz/crashes/TARGET-crash-...
# and turn it into a regression test in the normal suite. The last line per
# target gives its executions and time, for docs/RELIABILITY.md.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
read -ra targets <<< "${SHOAL_FUZZ_TARGETS:-FuzzFrameDecoder FuzzMessages FuzzInflate FuzzJSON FuzzDQL FuzzCoverage FuzzBatchReader FuzzPermissions}"
scripts/setup.sh
flags=(--package-path Tests/Fuzz --scratch-path .build-fuzz -Xswiftc -sanitize=fuzzer,address -Xswiftc -use-ld=lld)
swift build "${flags[@]}"
bin=$(swift build "${flags[@]}" --show-bin-path)
mkdir -p .build-fuzz/crashes
summary=()
failed=0
for target in "${targets[@]}"; do
  mkdir -p ".build-fuzz/corpus/$target"
  log=".build-fuzz/$target.log"
  status=0
  "$bin/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix=".build-fuzz/crashes/$target-" ".build-fuzz/corpus/$target" "Tests/Fuzz/Corpus/$target" \
    > "$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  units=$(find ".build-fuzz/corpus/$target" -type f | wc -l)
  if [ "$status" -ne 0 ]; then
    failed=1
    grep -E "ERROR|SUMMARY|Fatal error|Test unit written" "$log" | head -20 >&2 || true
    summary+=("$target: FAILED after ${runs:-?} executions (exit $status); see $log")
  else
    summary+=("$target: ${runs:-?} executions in ${took:-$seconds} s, no crash (corpus: $units new inputs)")
  fi
done
printf '%s\n' "${summary[@]}"
exit "$failed"
