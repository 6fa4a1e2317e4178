#!/usr/bin/env bash
# Tokenizer throughput on one core (the number recorded in docs/data.md).
#
#   scripts/bench-tokenizer.sh [BUILD_DIR] [--mb N] [--repeat N] [--file TEXT] [--tokenizer FILE]
#
# Builds lorabench-bench-tokenizer in BUILD_DIR (default: build), then runs it pinned to one CPU.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$here/build"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  build="$1"
  shift
fi
cmake --build "$build" --target lorabench-bench-tokenizer >/dev/null
pin=()
if command -v taskset >/dev/null 2>&1; then
  pin=(taskset -c "$(taskset -pc $$ | sed 's/.*: //; s/[,-].*//')")
fi
exec "${pin[@]}" "$build/src/data/lorabench-bench-tokenizer" "$@"
