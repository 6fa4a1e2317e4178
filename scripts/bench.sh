#!/usr/bin/env bash
# lorabench against transformers + peft (eager, torch.compile, DDP, FSDP2; Liger Kernel on GPU), the same
# workload from the same weights and tokens, alternating, one Markdown table (docs/performance.md).
#   scripts/bench.sh                                  # every workload of this device, 3 rounds
#   scripts/bench.sh --only 0.5b-bf16 --rounds 5 --out bench.md
#   scripts/bench.sh --quick                          # tiny shape, 1 round (what tests/e2e runs)
#   scripts/bench.sh --dtype fp32                     # every side in fp32 (the comparison an AVX2-only CPU can make)
#   scripts/bench.sh --device cpu --rounds 3 --evidence results   # also an evidence file for docs/results.md
# On a machine where torch sees a GPU the GPU table runs instead (--device cpu forces the CPU one).
# The peers run on the venv lorabench is built against (scripts/install-deps.sh installs torch and the
# pinned peers into it), so both sides use the same PyTorch release.
set -euo pipefail
# The command as typed, which an evidence file (--evidence) records.
LORABENCH_BENCH_COMMAND="$(printf '%q ' "$0" "$@")"
export LORABENCH_BENCH_COMMAND
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LORABENCH_BUILD_DIR="${LORABENCH_BUILD_DIR:-$here/build}"
"$here/scripts/install-deps.sh"
py="$("$here/scripts/torch-venv.sh")/bin/python"
"$here/scripts/build.sh" >/dev/null
exec "$py" "$here/bench/run_bench.py" --lorabench "$LORABENCH_BUILD_DIR/src/app/lorabench" "$@"
