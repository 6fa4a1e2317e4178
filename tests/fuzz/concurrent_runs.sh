#!/usr/bin/env bash
# Two `scripts/fuzz.sh run` at once against one fuzz build directory, as ctest -j starts the targets' tests:
# each must succeed (before the build step was locked, concurrent ninjas raced on the build log and one run
# failed, silently, in most rounds). Five rounds of two one-execution runs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in 1 2 3 4 5; do
  rc_a=0 rc_b=0
  "$here/scripts/fuzz.sh" run fuzz_config -n 1 >"$out/a.$i" 2>&1 &
  pid=$!
  "$here/scripts/fuzz.sh" run fuzz_safetensors -n 1 >"$out/b.$i" 2>&1 || rc_b=$?
  wait "$pid" || rc_a=$?
  if [ "$rc_a" -ne 0 ] || [ "$rc_b" -ne 0 ]; then
    echo "round $i: fuzz_config exit $rc_a, fuzz_safetensors exit $rc_b"
    cat "$out/a.$i" "$out/b.$i"
    exit 1
  fi
  grep -q "no findings" "$out/a.$i" && grep -q "no findings" "$out/b.$i" || { cat "$out/a.$i" "$out/b.$i"; exit 1; }
done
echo "5 rounds of two concurrent runs: all succeeded"
