#!/usr/bin/env bash
# Regenerates the HDF5 seeds of the checkpoint and run-file fuzz targets with lorabench's own writers:
# a 2-step run of the tiny preset (LoRA r=1 on q only, so the checkpoint stays small) writes run.h5 and
# checkpoints/step_00000002.h5; run.h5's tables are repacked to 4-row chunks (h5repack, hdf5-tools) so
# the file is ~50 KB instead of ~130 KB, and local paths are blanked out. Both are also the base files of
# the targets' edit scripts.
#   tests/fuzz/make_h5_seeds.sh BUILD_DIR     (BUILD_DIR holds src/app/lorabench)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$(cd "${1:?usage: make_h5_seeds.sh BUILD_DIR}" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && OMP_NUM_THREADS=1 "$build/src/app/lorabench" "$here/inputs/tiny.ini" --set run.steps=2 \
   --set run.warmup_steps=0 --set checkpoint.every=2 --set run.output_dir=out --set run.name=seed \
   --set run.quiet=true --set lora.r=1 --set lora.targets=q >/dev/null)
cp "$tmp/out/seed/checkpoints/step_00000002.h5" "$here/tests/fuzz/corpus/checkpoint/step_00000002.h5"
h5repack -l /metrics/steps,/metrics/counters,/ranks:CHUNK=4 "$tmp/out/seed/run.h5" "$tmp/run.h5"
# The run file records paths of this machine (argv, input file, working directory, libraries): each is
# overwritten in place by a string of the same length, so the file stays valid and names no local path.
python3 - "$tmp/run.h5" "$here/tests/fuzz/corpus/run_file/run.h5" "$here" "$build" "$tmp" "$HOME" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
for prefix in sorted({p for p in sys.argv[3:] if len(p) > 1}, key=len, reverse=True):
    p = prefix.encode()
    data = data.replace(p, b"/" + b"_" * (len(p) - 1))
open(sys.argv[2], "wb").write(data)
PY
ls -l "$here/tests/fuzz/corpus/checkpoint/step_00000002.h5" "$here/tests/fuzz/corpus/run_file/run.h5"
