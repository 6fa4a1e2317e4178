#!/usr/bin/env bash
# lorabench against the PyTorch-eager peer on the same workloads, alternating (docs/performance.md).
#   scripts/bench.sh                      # all workloads, 2 rounds
#   scripts/bench.sh --only 0.5b-bf16 --rounds 3
# Needs Debian's PyTorch for the peer (python3-torch): installed here when missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LORABENCH_BUILD_DIR="${LORABENCH_BUILD_DIR:-$here/build}"
"$here/scripts/install-deps.sh"
if ! /usr/bin/python3 -c "import torch" >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get install -y -qq --no-install-recommends python3-torch
fi
"$here/scripts/build.sh" >/dev/null
exec /usr/bin/python3 "$here/bench/run_bench.py" --lorabench "$LORABENCH_BUILD_DIR/src/app/lorabench" "$@"
