#!/usr/bin/env bash
# lorabench against the PyTorch-eager peer on the same workloads, alternating (docs/performance.md).
#   scripts/bench.sh                      # all workloads, 2 rounds
#   scripts/bench.sh --only 0.5b-bf16 --rounds 3
# The peer runs on the torch of the venv lorabench is built against (scripts/install-deps.sh installs it),
# so both sides use the same PyTorch release.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LORABENCH_BUILD_DIR="${LORABENCH_BUILD_DIR:-$here/build}"
"$here/scripts/install-deps.sh"
py="$("$here/scripts/torch-venv.sh")/bin/python"
"$here/scripts/build.sh" >/dev/null
exec "$py" "$here/bench/run_bench.py" --lorabench "$LORABENCH_BUILD_DIR/src/app/lorabench" "$@"
