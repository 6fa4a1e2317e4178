#!/usr/bin/env bash
# The strategies against each other: DDP scaling and exposed communication, FSDP memory and speed
# against DDP, and measured vs predicted model state for full fine-tuning (docs/performance.md).
#   scripts/bench-strategies.sh [--rounds N] [--steps N] [--out DIR]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LORABENCH_BUILD_DIR="${LORABENCH_BUILD_DIR:-$here/build}"
"$here/scripts/install-deps.sh"
"$here/scripts/build.sh" >/dev/null
exec "$("$here/scripts/torch-venv.sh")/bin/python" "$here/bench/strategies.py" --lorabench "$LORABENCH_BUILD_DIR/src/app/lorabench" \
  --report "$LORABENCH_BUILD_DIR/postprocess/lorabench-report" "$@"
