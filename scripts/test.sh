#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs every ctest label this machine supports
# (unit, mpi, e2e, slurm, multinode, fuzz, gpu; the gpu tests report themselves Skipped where no GPU is
# visible, multinode where the machine does not allow network namespaces).
#   scripts/test.sh                 # everything
#   scripts/test.sh -L unit         # extra arguments go to ctest
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${LORABENCH_BUILD_DIR:-$here/build}"
export LORABENCH_BUILD_DIR="$build"

"$here/scripts/install-deps.sh"
"$here/scripts/build.sh"

# One thread per rank everywhere in the tests: the MPI tests oversubscribe 2 cores with up to 4 ranks.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test.sh: no GPU visible: the gpu-labelled tests report themselves Skipped, with the reason"
fi
cd "$build"
ctest --output-on-failure -j "${LORABENCH_TEST_JOBS:-2}" --timeout 900 "$@"
