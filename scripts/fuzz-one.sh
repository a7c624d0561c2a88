#!/usr/bin/env bash
# fuzz-one.sh TARGET PACKAGE TIME [EXTRA...] runs one fuzz target for TIME. Go's fuzzing
# coordinator sometimes ends a run that found nothing with "context deadline exceeded" when
# -fuzztime elapses while a worker is still busy (a race, go.dev/issue/75804, fixed in Go 1.27;
# go1.26 has it); such a run, which wrote no failing input under testdata/fuzz, is tried once
# more. Any other failure is the failure.
set -uo pipefail
target=$1 pkg=$2 time=$3
shift 3
corpus="$pkg/testdata/fuzz/$target"
before=$(ls "$corpus" 2>/dev/null | wc -l)
for attempt in 1 2; do
  out=$("${GO:-go}" test -run '^$' -fuzz "^${target}\$" -fuzztime "$time" "$@" "$pkg" 2>&1)
  status=$?
  printf '%s\n' "$out"
  [ $status -eq 0 ] && exit 0
  after=$(ls "$corpus" 2>/dev/null | wc -l)
  if [ "$attempt" -eq 1 ] && [ "$after" -eq "$before" ] && grep -q 'context deadline exceeded' <<<"$out"; then
    echo "fuzz-one: $target ended with Go's 'context deadline exceeded' and wrote no failing input; trying once more" >&2
    continue
  fi
  exit $status
done
