#!/usr/bin/env bash
# Fuzzes every Go fuzz target in the module for a bounded time each (FUZZTIME, default 8s), one target
# at a time. Targets are discovered from the source, so new ones join without editing this script.
# A failure leaves the crashing input under the package's testdata/fuzz/<Target>/: fix the bug and
# commit that file, it then runs as a seed with every `go test`.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-8s}
start=$(date +%s)
count=0
while IFS=: read -r file name; do
  dir=$(dirname "$file")
  printf -- '-- %s %s (%s)\n' "$dir" "$name" "$fuzztime"
  # Go 1.26's fuzzing coordinator can fail a target with a bare "context deadline exceeded" as its
  # -fuzztime ends, having found nothing (go.dev/issue/75804, fixed in Go 1.27): it compares the
  # deadline's error with a child context's that is not cancelled yet. Such a run wrote no crasher;
  # it is run again (at most twice). Any other failure, or one that wrote an input, fails at once.
  for attempt in 1 2 3; do
    if out=$(go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "./$dir" 2>&1); then
      grep -v '^fuzz: elapsed' <<<"$out"
      break
    fi
    grep -v '^fuzz: elapsed' <<<"$out"
    if [[ $attempt -lt 3 ]] && grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written to' <<<"$out"; then
      echo "-- $name: the coordinator's deadline race (go.dev/issue/75804), no input found; again" >&2
      continue
    fi
    echo "fuzz target $name in $dir failed; the crasher is in $dir/testdata/fuzz/$name/" >&2
    exit 1
  done
  count=$((count + 1))
done < <(git ls-files '*_test.go' | xargs grep -oE '^func Fuzz[A-Za-z0-9_]+' | sed 's/^\(.*\):func /\1:/' | sort)
echo "fuzzed $count targets in $(( $(date +%s) - start ))s"
