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
  go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "./$dir" 2>&1 | grep -v '^fuzz: elapsed' || {
    echo "fuzz target $name in $dir failed; the crasher is in $dir/testdata/fuzz/$name/" >&2
    exit 1
  }
  count=$((count + 1))
done < <(git ls-files '*_test.go' | xargs grep -oE '^func Fuzz[A-Za-z0-9_]+' | sed 's/^\(.*\):func /\1:/' | sort)
echo "fuzzed $count targets in $(( $(date +%s) - start ))s"
