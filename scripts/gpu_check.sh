#!/usr/bin/env bash
# The GPU check (docs/gpu.md, "Checking on a GPU machine"): one script for a machine that has a GPU, the
# CUDA toolkit, a CUDA PyTorch, CMake and ninja, but not lorabench's other build dependencies and no
# network (the lent H200 machine: no MPI, HDF5, Boost, ... development files, no downloads).
#
#   scripts/gpu_check.sh prepare [DIR]    on a Debian 12 machine with network: downloads the Debian packages
#                                         lorabench builds against (Open MPI, parallel HDF5, Boost.Program_options,
#                                         nlohmann-json, PCRE2, Oniguruma, utf8proc, GoogleTest, pkgconf and their
#                                         libraries) into DIR (default gpu-carry/, git-ignored), < 64 MiB
#   scripts/gpu_check.sh run OUT [DIR]    on the GPU machine, from the repository root with DIR carried
#                                         beside it: unpacks the packages under DIR/root, builds lorabench
#                                         there against that machine's python3 torch (all cores), runs
#                                         20 steps of single on one GPU (NCCL), of zero2 and fsdp on one rank
#                                         with NCCL (their losses must be single's), `lorabench doctor`,
#                                         `ctest -L gpu`, then ddp, zero1, zero2, fsdp and tp 2 on 2 ranks
#                                         sharing it (MPI, staged), fp32 and bf16, each recording the planner's
#                                         prediction, and `lorabench plan` on the GPU; writes OUT/summary.md,
#                                         logs and run files
#   scripts/gpu_check.sh pack [DIR]       here, after prepare (optional): builds `run`'s targets against the
#                                         image's torch release with `run`'s options (build-gpu-pack/) and puts
#                                         them and their CTest files in DIR/prebuilt/ (about 15 MiB), so that
#                                         `run` there starts from them instead of building: it relocates them to
#                                         build-gpu/ when they were built from the same source tree and start
#                                         there (their libraries load), and otherwise says why and builds
#   scripts/gpu_check.sh relocate [DIR]   that decision alone: DIR/prebuilt relocated to build-gpu/, or why not
#   scripts/gpu_check.sh build OUT [DIR]  the first steps of `run` alone (unpack, configure, build): on the
#                                         lent machine one command each, so that neither runs into the limit
#                                         of one command; `run` then finds the build up to date
#   scripts/gpu_check.sh bench OUT [DIR]  on the GPU machine after `run` (its build-gpu/ kept): the GPU table of
#                                         issue 21, scripts/bench.sh's GPU workload (lorabench against
#                                         transformers + peft eager, torch.compile and Liger Kernel, 2 rounds)
#                                         with the image's python and the carried liger-kernel wheel; writes
#                                         OUT/bench-gpu.md and .json. LB_GPU_CHECK_BENCH_ARGS replaces the
#                                         arguments (default: --device cuda --rounds 2). Then the DeepSpeed
#                                         pairs (--deepspeed) where 2 GPUs and DeepSpeed are there, else
#                                         OUT/bench-deepspeed-gpu.md says which is missing
#   scripts/gpu_check.sh profile OUT [DIR] on the GPU machine after run: where the GPU step goes, both sides in
#                                         the same op groups (lorabench-profile-ops, bench/profile_peer.py
#                                         eager, liger, compile); OUT/profile-*.md
#   scripts/gpu_check.sh preflight [VERSION] [DIR]
#                                         here, before the GPU machine: builds lorabench (CUDA, NCCL) against
#                                         that machine's torch release (default 2.11.0, the image's; its wheel
#                                         from PyPI) in build directory DIR (default build-preflight/) and
#                                         runs its ctest here
#   scripts/gpu_check.sh preflight-peers [BUILD]
#                                         here: the benchmark's peers and profilers with the image's torch,
#                                         transformers and their companions (a venv beside this project's),
#                                         on the CPU with BUILD's (default build/) lorabench: its e2e cases
#                                         valid and profiles
#   scripts/gpu_check.sh env DIR          prints the environment `run` uses (to source it by hand)
#
# Every step of `run` is timed and its outcome recorded; a failing step does not stop the later ones, and the
# exit code is non-zero when any failed. LB_GPU_CHECK_BUILD=DIR uses an existing build instead of building.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The packages and their libraries that a CUDA PyTorch image lacks (Debian 12 names; the extracted files
# run on any glibc >= 2.36).
PACKAGES=(
  openmpi-bin openmpi-common libopenmpi-dev libopenmpi3 libpmix2 libhwloc15 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libpsm2-2
  libpsm-infinipath1 libmunge2 libxnvctrl0 libpciaccess0 libltdl7 libgfortran5
  libhdf5-openmpi-dev libhdf5-openmpi-103-1 libhdf5-openmpi-hl-100 libhdf5-openmpi-cpp-103-1
  libhdf5-openmpi-hl-cpp-100 libsz2 libaec0 libcurl3-gnutls
  libboost-program-options1.74-dev libboost-program-options1.74.0 libboost1.74-dev
  nlohmann-json3-dev libpcre2-dev libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2
  libonig-dev libonig5
  libgtest-dev pkgconf pkgconf-bin libpkgconf3
  hdf5-tools libhdf5-103-1 libhdf5-hl-100
)
# The benchmark's GPU-only peer, not in the image (pure Python; needs only the image's torch and triton).
WHEELS_REQUIREMENTS=$here/bench/requirements-peers-gpu.txt
LIMIT_MIB=60
# The torch release of the lent machine's image (its python3's torch: 2.11.0+cu130 when last read, 2026-11):
# what `preflight` builds against.
IMAGE_TORCH=2.11.0
# The image's Python packages that the benchmark's peers import, at the versions its pip list showed
# (2026-11; peft's version was not read there: the project's pin stands in for it). preflight-peers runs
# the peers with them here.
IMAGE_PEERS=(transformers==5.17.0 accelerate==1.15.0 huggingface_hub==1.33.0 tokenizers==0.23.2 safetensors==0.8.0)
# What `run` builds there, and nothing else (118 of the build's 210 steps; the other test binaries are not
# worth the lent minutes): the binaries, `profile`'s lorabench-profile-ops, the gpu-labelled tests'
# executables and the device unit tests. tests/e2e/gpu_check_targets.sh checks here that every gpu test's
# executables are among them.
GPU_CHECK_TARGETS=(lorabench lorabench-report lorabench-profile-ops lorabench_e2e_check test_comm_nccl_gpu
  test_gpu_model test_strategies_gpu test_tensor_parallel_gpu test_device test_comm_staging test_link_order)
# The gpu tests that need two GPUs (NCCL puts one rank on each): left out of `run` on a machine with one.
TWO_GPU_TESTS='test_comm_nccl_gpu_np2'
# The CPU-side device tests `run` also runs there (a ctest -R regex): the image's GCC and torch differ from
# the ones here.
DEVICE_UNIT_TESTS='test_device|DeviceChoice|CpuDevice|test_comm_staging|LinkOrder'

die() { echo "gpu_check: $*" >&2; exit 1; }

prepare() {
  local dir=$1
  mkdir -p "$dir/debs"
  (cd "$dir/debs" && apt-get download "${PACKAGES[@]}") || die "apt-get download failed (a Debian 12 machine with its package index is needed)"
  mkdir -p "$dir/wheels"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$dir/wheels" -r "$WHEELS_REQUIREMENTS" ||
    die "pip download of $WHEELS_REQUIREMENTS failed (PyPI is needed)"
  (cd "$dir" && ls -1 debs/*.deb wheels/*.whl) >"$dir/MANIFEST"
  echo "gpu_check: $(wc -l <"$dir/MANIFEST") packages and wheels in $dir/debs and $dir/wheels"
  carry_size "$dir"
}

# carry_size DIR: what travels (debs, wheels and a packed build) within LIMIT_MIB, or die.
carry_size() {
  local dir=$1 mib parts=()
  local p
  for p in debs wheels prebuilt; do [[ -d $dir/$p ]] && parts+=("$dir/$p"); done
  mib=$(du -scm "${parts[@]}" | tail -n 1 | cut -f1)
  [[ $mib -le $LIMIT_MIB ]] || die "${parts[*]} hold $mib MiB, more than $LIMIT_MIB MiB"
  echo "gpu_check: $dir carries $mib MiB (at most $LIMIT_MIB)"
}

# tree_hash: one hash of what the build is made from (CMake files, sources, tests), the same for the same
# tree anywhere: the check that a packed build belongs to the checkout `run` finds it in.
tree_hash() {
  (cd "$here" && find CMakeLists.txt cmake include src tests bench postprocess -type f \
      ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum |
    cut -c1-16)
}

# configure_gpu BUILD TORCH: the build `run` makes there (and `pack` here): CUDA, NCCL, no PAPI (a CPU
# counter that the image lacks), Release; TORCH is a python with torch or an unpacked torch/ directory.
configure_gpu() {
  cmake -S "$here" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLORABENCH_TORCH="$2" \
    -DLORABENCH_WITH_CUDA=ON -DLORABENCH_WITH_NCCL=ON -DLORABENCH_WITH_PAPI=OFF ${HDF5_ROOT:+-DHDF5_ROOT="$HDF5_ROOT"} \
    -DMPIEXEC_PREFLAGS="--oversubscribe" "${@:3}"
}

# unpack DIR: every carried .deb extracted under DIR/root (dpkg-deb, or python3 where dpkg is missing).
unpack() {
  local dir=$1 root
  [[ -d $dir/debs ]] || die "$dir/debs is missing: run 'scripts/gpu_check.sh prepare $dir' where there is network, and carry $dir"
  root=$(cd "$dir" && pwd)/root
  # Unpacked already from the same packages (`build`, then `run`, on one machine): kept as it is, so that
  # the build made against it stays up to date.
  local listing
  listing=$(ls -l "$dir"/debs/ 2>/dev/null)
  if [[ -f $root/.unpacked && $(cat "$root/.unpacked") == "$listing" ]]; then
    return 0
  fi
  rm -rf "$root"
  mkdir -p "$root"
  local deb
  for deb in "$dir"/debs/*.deb; do
    [[ -e $deb ]] || continue  # none carried (a machine with its own packages; the flow's test)
    if command -v dpkg-deb >/dev/null 2>&1; then
      dpkg-deb -x "$deb" "$root" || die "cannot unpack $deb"
    else
      python3 - "$deb" "$root" <<'PY' || die "cannot unpack $deb"
import io, sys, tarfile
deb, root = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
assert data[:8] == b"!<arch>\n", deb + ": not an ar archive"
pos = 8
while pos < len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(body)).extractall(root)
    pos += 60 + size + (size & 1)
PY
    fi
  done
  # Debian's alternatives are made by maintainer scripts, which do not run here: the names CMake and
  # users look for, pointing at the Open MPI flavours.
  local b
  for b in mpirun mpiexec mpicc mpicxx mpic++; do
    [[ -e $root/usr/bin/$b.openmpi ]] && ln -sf "$b.openmpi" "$root/usr/bin/$b"
  done
  [[ -e $root/usr/bin/pkgconf ]] && ln -sf pkgconf "$root/usr/bin/pkg-config"
  # Symbolic links inside the packages are absolute (/usr/lib/...): make them point into the root.
  local link target
  while IFS= read -r link; do
    target=$(readlink "$link")
    [[ $target == /* ]] && ln -sfn "$root$target" "$link"
  done < <(find "$root" -type l)
  # pkg-config files name prefix=/usr: rewrite them to the root.
  find "$root" -name '*.pc' -exec sed -i "s#^prefix=/usr#prefix=$root/usr#; s#=/usr/#=$root/usr/#g" {} +
  printf '%s' "$listing" >"$root/.unpacked"
}

# The environment that makes the unpacked packages usable in place (printed by `env`).
environment() {
  local root
  root=$(cd "$1" && pwd)/root
  local arch=x86_64-linux-gnu
  local ompi=$root/usr/lib/$arch/openmpi
  cat <<EOF
export LB_CARRY_ROOT="$root"
# Debian's parallel HDF5 as a prefix of its own (include/ and lib/ links): FindHDF5 has no openmpi suffix.
export HDF5_ROOT="$root/usr/lib/$arch/hdf5/openmpi"
export PATH="$root/usr/bin:\$PATH"
export LD_LIBRARY_PATH="$ompi/lib:$root/usr/lib/$arch/hdf5/openmpi:$root/usr/lib/$arch:\${LD_LIBRARY_PATH:-}"
export PKG_CONFIG_PATH="$root/usr/lib/$arch/pkgconfig:$root/usr/share/pkgconfig:$root/usr/lib/$arch/hdf5/openmpi/pkgconfig"
export CMAKE_PREFIX_PATH="$root/usr:\${CMAKE_PREFIX_PATH:-}"
export CPATH="$root/usr/include:\${CPATH:-}"
export LIBRARY_PATH="$ompi/lib:$root/usr/lib/$arch:\${LIBRARY_PATH:-}"
EOF
  # Open MPI found where it was unpacked (its installdirs read these), PMIx likewise; only when it was
  # carried, so that a carry without it leaves the machine's own Open MPI as it is.
  [[ -d $ompi ]] && cat <<EOF
export OPAL_PREFIX="$root/usr" OPAL_EXEC_PREFIX="$root/usr" OPAL_BINDIR="$root/usr/bin" OPAL_LIBDIR="$ompi/lib"
export OPAL_INCLUDEDIR="$ompi/include" OPAL_DATAROOTDIR="$root/usr/share" OPAL_DATADIR="$root/usr/share"
export OPAL_PKGDATADIR="$root/usr/share/openmpi" OPAL_SYSCONFDIR="$root/etc/openmpi"
export OPAL_PKGLIBDIR="$ompi/lib/openmpi3"
export PMIX_INSTALL_PREFIX="$root/usr" PMIX_MCA_mca_base_component_path="$root/usr/lib/$arch/pmix2/lib/pmix"
EOF
  cat <<EOF
# One host, as root: shared memory between ranks, no UCX or verbs probing.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=^ucx OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 HWLOC_HIDE_ERRORS=1
# Shared memory by copy-in/copy-out: the single-copy mechanisms (CMA's process_vm_readv) are often denied
# in containers, which fails every 2-rank transfer.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
EOF
}

# last_step_line LOG: a training log's last "step N/M  loss X ..." line.
last_step_line() { grep -E '^step [0-9]+/[0-9]+ +loss ' "$1" | tail -n 1; }

# last_losses_match TOL REF.log LOG...: the last step line of each LOG has REF's step and a loss within
# relative TOL of REF's.
last_losses_match() {
  local tol=$1 ref=$2 f want
  shift 2
  want=$(last_step_line "$ref" | awk '{print $2, $4}')
  [[ -n $want ]] || { echo "no step line in $ref"; return 1; }
  echo "$ref: $(last_step_line "$ref")"
  for f in "$@"; do
    echo "$f: $(last_step_line "$f")"
    last_step_line "$f" | awk -v want="$want" -v tol="$tol" -v f="$f" '
      { split(want, w, " "); d = $4 - w[2]; if (d < 0) d = -d
        if ($2 != w[1] || d > tol * (w[2] < 0 ? -w[2] : w[2])) { print f ": step " $2 " loss " $4 ", expected step " w[1] " loss " w[2]; bad = 1 } }
      END { exit (NR == 0 || bad) }' || return 1
  done
}

# step NAME CMD...: runs CMD with its output in OUT/logs/NAME.log, records the outcome and seconds.
step() {
  local name=$1
  shift
  local t0=$SECONDS rc=0
  "$@" >"$OUT/logs/$name.log" 2>&1 || rc=$?
  local dt=$((SECONDS - t0))
  if [[ $rc -eq 0 ]]; then
    echo "| $name | ok | $dt |" >>"$OUT/steps.md"
  else
    echo "| $name | FAILED (exit $rc) | $dt |" >>"$OUT/steps.md"
    FAILED=$((FAILED + 1))
    { echo "### $name: last lines"; echo '```'; tail -n 30 "$OUT/logs/$name.log"; echo '```'; } >>"$OUT/failures.md"
  fi
  echo "gpu_check: $name: $([[ $rc -eq 0 ]] && echo ok || echo "FAILED ($rc)") in ${dt}s"
  summarize
  return 0
}

# summarize: OUT/summary.md from what the steps so far left in OUT. `step` calls it after every step of
# `run`, so a command cut off by the lent machine's time limit still brings back a summary up to there.
summarize() {
  {
    echo "# lorabench GPU check"
    echo
    echo '```'
    cat "$OUT/versions.txt"
    echo '```'
    echo
    [[ ${RUN_DONE:-0} -eq 1 ]] ||
      echo "**Incomplete**: written after the last step below; the steps after it did not run (cut off?)."
    echo
    echo "| step | outcome | seconds |"
    echo "| --- | --- | --- |"
    cat "$OUT/steps.md"
    echo
    echo "## gpu tests"
    echo '```'
    grep -E 'Test +#|tests passed|Skipped|Failed' "$OUT/logs/ctest_gpu.log" 2>/dev/null | tail -n 20
    echo '```'
    echo
    echo "## doctor"
    echo '```'
    cat "$OUT/logs/doctor_1rank.log" "$OUT/logs/doctor_2ranks_shared.log" 2>/dev/null | grep -E 'cuda|gpu_collective|ready|FAIL'
    echo '```'
    echo
    echo "## runs (last step line, summary line)"
    echo '```'
    for f in "$OUT"/logs/single_*.log "$OUT"/logs/*_1rank_nccl_*.log "$OUT"/logs/*_2ranks_*.log; do
      [[ -f $f ]] || continue
      echo "$(basename "$f" .log): $(last_step_line "$f")"
      echo "    $(grep -E '^run: ' "$f" | tail -n 1)"
    done
    echo '```'
    echo
    echo "## the planner on the GPU"
    cat "$OUT/plan-gpu.md" "$OUT/plan-gpu-2ranks.md" 2>/dev/null
    echo
    awk '/^## / { on = ($0 == "## Prediction vs measurement") } on' "$OUT/report.md" 2>/dev/null
    [[ -s $OUT/failures.md ]] && { echo; echo "## failures"; cat "$OUT/failures.md"; }
  } >"$OUT/summary.md.part"
  mv -f "$OUT/summary.md.part" "$OUT/summary.md"  # whole or not at all, even when cut off while writing it
  return 0
}

run() {
  OUT=$(mkdir -p "$1" && cd "$1" && pwd)
  local dir=$2 only_build=${3:-0}
  mkdir -p "$OUT/logs"
  : >"$OUT/steps.md"
  : >"$OUT/failures.md"
  FAILED=0 RUN_DONE=0
  unpack "$dir"
  eval "$(environment "$dir")"
  local build=$here/build-gpu py
  py=$(command -v python3)
  local jobs
  jobs=$(nproc)
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
    echo "nvcc: $(nvcc --version 2>&1 | tail -n 2 | head -n 1)"
    echo "torch: $("$py" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())' 2>&1)"
    echo "cmake: $(cmake --version | head -n 1)"
    echo "cores: $jobs"
  } >"$OUT/versions.txt"

  if [[ -n ${LB_GPU_CHECK_BUILD:-} ]]; then  # an existing build (to try the script's flow without a build)
    build=$LB_GPU_CHECK_BUILD
  elif [[ -f $dir/prebuilt/ORIGIN ]] && use_prebuilt "$dir/prebuilt" "$build" >"$OUT/logs/prebuilt.log" 2>&1; then
    echo "| prebuilt | ok (relocated, not built here) | 0 |" >>"$OUT/steps.md"
    echo "build: packed elsewhere by 'gpu_check.sh pack' ($(tr '\n' ' ' <"$dir/prebuilt/ORIGIN"))" >>"$OUT/versions.txt"
  else
    # A packed build that does not fit this checkout or machine is not a failure of the check: said, then built.
    if [[ -f $dir/prebuilt/ORIGIN ]]; then
      echo "| prebuilt | not used: $(tail -n 1 "$OUT/logs/prebuilt.log") | 0 |" >>"$OUT/steps.md"
      echo "build: made here, as the packed one was not usable (logs/prebuilt.log)" >>"$OUT/versions.txt"
    fi
    step configure configure_gpu "$build" "$py"
    step build cmake --build "$build" -j "$jobs" --target "${GPU_CHECK_TARGETS[@]}"
  fi
  prebuilt_libraries "$build"
  # Which CUDA runtime, NCCL and libtorch the binary loads here (one of each; from python3's torch for a
  # packed build).
  ldd "$build/src/app/lorabench" 2>&1 | grep -E 'cudart|nccl|torch_cuda|not found' | sed 's/^[[:space:]]*/loads: /' \
    >>"$OUT/versions.txt"
  if [[ $only_build -eq 1 ]]; then  # `build`: the first command on the lent machine; `run` follows
    RUN_DONE=1
    summarize
    echo "gpu_check: $FAILED step(s) failed; $OUT/summary.md"
    [[ $FAILED -eq 0 ]]
    return
  fi
  local lb=$build/src/app/lorabench
  local work=$OUT/runs
  mkdir -p "$work"
  # single_DTYPE: 20 steps of single on one GPU (NCCL), the planner's prediction recorded.
  single_run() {
    step "single_$1" bash -c "cd '$work' && '$lb' '$here/inputs/tiny.ini' --set run.steps=20 --set model.dtype=$1 \
      --set parallel.device=cuda --set parallel.backend=nccl --set profile.peak_gflops=0 --set run.predict=true \
      --set run.name=single-$1"
  }
  # First what says most in the fewest seconds: the binary trains on the GPU at all.
  single_run fp32
  # NCCL's device path on this one GPU: even on one rank ZeRO-2 reduce-scatters its gradient buckets during
  # the backward and FSDP gathers, prefetches and reduce-scatters its layers, on the communication stream,
  # ordered by events (DDP skips its all-reduce on one rank); both must train as single did (the same seed:
  # the same losses, to fp32 rounding of the sums' order).
  for s in zero2 fsdp; do
    step "${s}_1rank_nccl_fp32" bash -c "cd '$work' && '$lb' '$here/inputs/tiny.ini' --set run.steps=20 \
      --set model.dtype=fp32 --set parallel.strategy=$s --set parallel.device=cuda --set parallel.backend=nccl \
      --set profile.peak_gflops=0 --set run.name=$s-1rank-nccl-fp32"
  done
  step nccl_1rank_losses_match_single last_losses_match 1e-4 "$OUT/logs/single_fp32.log" \
    "$OUT/logs/zero2_1rank_nccl_fp32.log" "$OUT/logs/fsdp_1rank_nccl_fp32.log"
  step doctor_1rank "$lb" doctor
  # The gpu tests, bounded so that a hang cannot take the rest of the lent minutes. A test that needs more
  # GPUs than the machine has is left out and said so (it would skip, and a skip fails the next step).
  local exclude="" gpus
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [[ ${gpus:-0} -lt 2 ]]; then
    exclude="-E '$TWO_GPU_TESTS'"
    echo "not run here: $TWO_GPU_TESTS (needs 2 GPUs; ${gpus:-0} visible)" >>"$OUT/versions.txt"
  fi
  step ctest_gpu bash -c "cd '$build' && timeout ${LB_GPU_CHECK_CTEST_S:-420} ctest -L gpu $exclude --output-on-failure \
    --timeout 300"
  # On the GPU machine a Skipped gpu test is a failure of the check: it did not see the GPU.
  step gpu_tests_not_skipped bash -c "! grep -E '\*\*\*Skipped' '$OUT/logs/ctest_gpu.log'"
  step ctest_device_unit bash -c "cd '$build' && ctest -R '$DEVICE_UNIT_TESTS' --output-on-failure"
  step doctor_2ranks_shared mpirun -n 2 "$lb" doctor
  local dtype s
  for dtype in fp32 bf16; do
    [[ $dtype == fp32 ]] || single_run "$dtype"
    for s in ddp zero1 zero2 fsdp; do
      step "${s}_2ranks_$dtype" bash -c "cd '$work' && mpirun -n 2 '$lb' '$here/inputs/tiny.ini' --set run.steps=20 \
        --set model.dtype=$dtype --set parallel.strategy=$s --set parallel.device=cuda --set parallel.backend=mpi \
        --set profile.peak_gflops=0 --set run.predict=true --set run.name=$s-$dtype"
    done
    # Tensor parallelism (parallel.tp = 2, one group on the 2 ranks sharing the GPU): the group's all-reduces on
    # device buffers, staged by the MPI backend.
    step "tp2_2ranks_$dtype" bash -c "cd '$work' && mpirun -n 2 '$lb' '$here/inputs/tiny.ini' --set run.steps=20 \
      --set model.dtype=$dtype --set parallel.tp=2 --set parallel.device=cuda --set parallel.backend=mpi \
      --set profile.peak_gflops=0 --set run.predict=true --set run.name=tp2-$dtype"
  done
  # The small preset on one GPU: a size where the GPU, not the launch overhead, sets the step time.
  step single_small_bf16 bash -c "cd '$work' && '$lb' '$here/inputs/tiny.ini' --set model.preset=small --set run.steps=20 \
    --set model.dtype=bf16 --set data.seq_len=512 --set train.micro_batch=8 --set parallel.device=cuda \
    --set profile.peak_gflops=0 --set run.predict=true --set run.name=single-small-bf16"
  # The same with the memory-efficient attention kernel instead of FlashAttention-2 (model.cuda_attention):
  # the summary's step times compare the two.
  step single_small_bf16_efficient bash -c "cd '$work' && '$lb' '$here/inputs/tiny.ini' --set model.preset=small \
    --set run.steps=20 --set model.dtype=bf16 --set data.seq_len=512 --set train.micro_batch=8 \
    --set parallel.device=cuda --set model.cuda_attention=efficient --set profile.peak_gflops=0 \
    --set run.predict=false --set run.name=single-small-bf16-efficient"
  # Qwen3.5's hybrid layers on the GPU (their device-generic ATen path: the gated delta rule, the convolution, the
  # gated norm; no CUDA kernel of lorabench's yet), FSDP over NCCL on one rank, bf16.
  step qwen3_5_tiny_bf16 bash -c "cd '$work' && '$lb' '$here/inputs/qwen3_5.ini' --set model.preset=qwen3.5-tiny \
    --set run.steps=10 --set lora.r=4 --set parallel.device=cuda --set profile.peak_gflops=0 \
    --set run.predict=true --set run.name=qwen3-5-tiny-bf16"
  # The planner on the GPU (docs/plan.md): one process (no bandwidth), and 2 ranks sharing the GPU through
  # the staged MPI backend (bandwidth measured on device buffers).
  step plan_gpu "$lb" plan "$here/inputs/tiny.ini" --set model.preset=small --set model.dtype=bf16 \
    --set data.seq_len=512 --set train.micro_batch=8 --set parallel.device=cuda -o "$OUT/plan-gpu.md"
  step plan_gpu_2ranks_shared mpirun -n 2 "$lb" plan "$here/inputs/tiny.ini" --set model.preset=small \
    --set model.dtype=bf16 --set data.seq_len=512 --set train.micro_batch=8 --set parallel.device=cuda \
    --set parallel.backend=mpi -n 2 -o "$OUT/plan-gpu-2ranks.md"
  step report bash -c "cd '$work' && '$build/postprocess/lorabench-report' outputs/*/run.h5 > '$OUT/report.md'"
  RUN_DONE=1

  summarize
  # The run files, without checkpoints or adapters (they stay small).
  find "$work" -name '*.safetensors' -delete 2>/dev/null
  echo "gpu_check: $FAILED step(s) failed; $OUT/summary.md"
  [[ $FAILED -eq 0 ]]
}

# use_prebuilt PACKED BUILD: the build `pack` made, relocated to BUILD: used when it was packed from this
# very source tree and its lorabench starts here with this machine's torch (every library it links loads);
# otherwise BUILD is removed and the last line says why. Kept as it is when BUILD holds it already (`build`
# then `run`).
use_prebuilt() {
  local packed=$1 build=$2 want have key value
  local -A origin=()
  while IFS='=' read -r key value; do origin[$key]=$value; done <"$packed/ORIGIN"
  have=$(tree_hash)
  want=${origin[tree]:-}
  # Not usable: a copy relocated earlier goes too (build then configures and builds BUILD afresh).
  unusable() { [[ -e $build/.packed ]] && rm -rf "$build"; echo "$1"; return 1; }
  [[ $want == "$have" ]] ||
    { unusable "packed from source tree $want, this checkout is $have (pack again after changing the sources)"; return 1; }
  if [[ ! -f $build/.prebuilt || $(cat "$build/.prebuilt") != "$want" ]]; then
    rm -rf "$build"
    mkdir -p "$build"
    (cd "$packed" && tar cf - --exclude=./ORIGIN .) | (cd "$build" && tar xf -) ||
      { unusable "cannot copy $packed"; return 1; }
    # The CTest files name the source tree, the build directory and mpiexec of the machine that packed them.
    local mpiexec=${origin[mpiexec]:-}
    local new_mpiexec
    new_mpiexec=$(command -v mpiexec || true)
    python3 - "$build" "${origin[build]}" "$build" "${origin[source]}" "$here" "$mpiexec" "$new_mpiexec" <<'PY' ||
import pathlib, sys
root, old_build, new_build, old_src, new_src, old_mpi, new_mpi = sys.argv[1:]
# The build directory lies inside the source tree: it first, each through a placeholder, so that no
# replacement is replaced again.
pairs = [(old_build, new_build), (old_src, new_src)] + ([(old_mpi, new_mpi)] if old_mpi and new_mpi else [])
for path in pathlib.Path(root).rglob("*.cmake"):
    text = path.read_text()
    for i, (old, _) in enumerate(pairs):
        text = text.replace(old, f"\0{i}\0")
    for i, (_, new) in enumerate(pairs):
        text = text.replace(f"\0{i}\0", new)
    path.write_text(text)
PY
      { unusable "cannot relocate the CTest files in $build"; return 1; }
  fi
  prebuilt_libraries "$build" || { unusable "python3 has no torch here, whose libraries the packed build needs"; return 1; }
  local out
  # Every symbol bound at start (LD_BIND_NOW): a function the loaded libraries lack fails here, not later.
  if ! out=$(LD_BIND_NOW=1 "$build/src/app/lorabench" --version 2>&1); then
    echo "$out"
    unusable "its lorabench does not start here: $(tail -n 1 <<<"$out")"
    return 1
  fi
  echo "$out"
  echo "$want" >"$build/.prebuilt"
  echo "relocated $packed to $build (source tree $want)"
}

# prebuilt_libraries BUILD: a packed build's binaries name the packing machine's torch and CUDA libraries in
# their RUNPATH; on this machine they come from python3's torch and its nvidia-* packages. Nothing for a
# build made here.
prebuilt_libraries() {
  [[ -e $1/.packed && -z ${LB_PACKED_LIBRARIES:-} ]] || return 0
  local libs
  libs=$(python3 -c 'import glob, os, torch
d = os.path.dirname(torch.__file__)
print(":".join([os.path.join(d, "lib")] + sorted(glob.glob(os.path.join(os.path.dirname(d), "nvidia", "*", "lib")))))') ||
    return 1
  export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LB_PACKED_LIBRARIES=1
}

# The environment of bench and profile: the carried packages unpacked, their environment, the carried
# wheels (liger-kernel) installed beside the image's python on PYTHONPATH; sets OUT and build.
bench_env() {
  OUT=$(mkdir -p "$1" && cd "$1" && pwd)
  local dir=$2
  [[ -d $dir/root ]] || unpack "$dir"
  eval "$(environment "$dir")"
  build=${LB_GPU_CHECK_BUILD:-$here/build-gpu}
  prebuilt_libraries "$build" || die "a packed build in $build, but no torch to run it with"
  local pylib
  pylib=$(cd "$dir" && pwd)/python
  if ls "$dir"/wheels/*.whl >/dev/null 2>&1; then
    python3 -m pip install --quiet --no-deps --no-index --target "$pylib" "$dir"/wheels/*.whl ||
      die "cannot install the carried wheels into $pylib"
  fi
  export PYTHONPATH="$pylib${PYTHONPATH:+:$PYTHONPATH}"
}

# bench OUT DIR: the GPU table (run_bench.py) with the build `run` made, the carried packages (h5dump, mpirun)
# and liger-kernel installed from the carried wheel into DIR/python (on PYTHONPATH, nothing else changed).
bench() {
  local build
  bench_env "$1" "$2"
  [[ -x $build/src/app/lorabench ]] || die "no lorabench in $build: run 'scripts/gpu_check.sh run OUT' first"
  read -r -a extra <<<"${LB_GPU_CHECK_BENCH_ARGS:---device cuda --rounds 2}"
  python3 "$here/bench/run_bench.py" --lorabench "$build/src/app/lorabench" "${extra[@]}" \
    --out "$OUT/bench-gpu.md" --json "$OUT/bench-gpu.json" 2>&1 | tee "$OUT/bench-gpu.log"
  local rc=${PIPESTATUS[0]}
  bench_deepspeed "$build" || rc=1
  return "$rc"
}

# The DeepSpeed pairs (scripts/bench.sh --deepspeed, docs/performance.md) on the GPU: 2 ranks, each with a GPU of
# its own (NCCL refuses two ranks on one GPU), and DeepSpeed in the image, which compiles its CUDA ops on first
# use. Runs them where both are there (one round, OUT/bench-deepspeed-gpu.md); otherwise that file says which is
# missing, so the check's output answers the question either way.
bench_deepspeed() {
  local build=$1 gpus ds
  gpus=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
  ds=$(python3 -c "import importlib.metadata as m; print(m.version('deepspeed'))" 2>/dev/null || true)
  if [[ $gpus -ge 2 && -n $ds ]]; then
    python3 "$here/bench/run_bench.py" --lorabench "$build/src/app/lorabench" --deepspeed --device cuda --rounds 1 \
      --out "$OUT/bench-deepspeed-gpu.md" --json "$OUT/bench-deepspeed-gpu.json" 2>&1 | tee "$OUT/bench-deepspeed-gpu.log"
    return "${PIPESTATUS[0]}"
  fi
  {
    echo "# The DeepSpeed pairs on the GPU: not run"
    echo
    echo "- GPUs visible: $gpus (the pairs run on 2 ranks, one GPU each: NCCL refuses two ranks on one GPU)"
    echo "- DeepSpeed in this image: ${ds:-not installed (and the machine has no network to install it)}"
  } | tee "$OUT/bench-deepspeed-gpu.md"
}

# profile OUT DIR: where the GPU step goes, both sides in the same op groups (docs/performance.md), for
# when a target of the GPU table is not reached: lorabench-profile-ops and bench/profile_peer.py (eager,
# Liger, torch.compile) on the GPU workload, 3 profiled steps each; OUT/profile-*.md. LB_GPU_CHECK_PROFILE_
# DEVICE, _PRESET, _SHAPE, _MODES and _DTYPE replace cuda, qwen2.5-0.5b, "--seq 2048 --batch 8", "eager liger
# compile" and bf16 (tests/e2e: the tiny shape on the CPU). Each profiler's messages go to OUT/profile-*.log.
profile() {
  local build
  bench_env "$1" "$2"
  local dev=${LB_GPU_CHECK_PROFILE_DEVICE:-cuda} preset=${LB_GPU_CHECK_PROFILE_PRESET:-qwen2.5-0.5b} shape mode
  local dt=${LB_GPU_CHECK_PROFILE_DTYPE:-bf16}
  read -r -a shape <<<"${LB_GPU_CHECK_PROFILE_SHAPE:---seq 2048 --batch 8}"
  local ops=$build/bench/lorabench-profile-ops failed=0
  [[ -x $ops ]] || die "no lorabench-profile-ops in $build: run 'scripts/gpu_check.sh run OUT' first (it builds it)"
  echo "gpu_check profile: lorabench" >&2
  "$ops" --device "$dev" --preset "$preset" --dtype "$dt" "${shape[@]}" --steps 3 --warmup 1 >"$OUT/profile-lorabench.md" \
    2>"$OUT/profile-lorabench.log" ||
    { echo "gpu_check profile: lorabench-profile-ops failed ($OUT/profile-lorabench.log)" >&2; failed=1; }
  for mode in ${LB_GPU_CHECK_PROFILE_MODES:-eager liger compile}; do
    echo "gpu_check profile: hf-$mode" >&2
    python3 "$here/bench/profile_peer.py" --device "$dev" --preset "$preset" --mode "$mode" --precision "$dt" "${shape[@]}" \
      --steps 3 --warmup "$([[ $mode == compile ]] && echo 2 || echo 1)" >"$OUT/profile-hf-$mode.md" \
      2>"$OUT/profile-hf-$mode.log" ||
      { echo "gpu_check profile: profile_peer.py --mode $mode failed ($OUT/profile-hf-$mode.log)" >&2; failed=1; }
  done
  return $failed
}

# preflight VERSION DIR: here, before a GPU machine is used: lorabench built with CUDA and NCCL against that
# machine's torch release and its ctest run on this machine (the gpu tests skip), so that an API or ABI
# difference between the torch lorabench is tested with and the image's fails here rather than in the lent
# minutes. The release's wheel comes from PyPI and is unpacked beside this project's venv (outside the
# checkout, as an installed lorabench's RUNPATH keeps only libraries outside the project), with the venv's
# nvidia-* wheels linked beside it; DIR is the build directory.
preflight() {
  local version=$1 dir=$2 site
  site=$(torch_release "$version")
  LORABENCH_BUILD_DIR=$dir "$here/scripts/build.sh" -DLORABENCH_TORCH="$site/torch" \
    -DLORABENCH_WITH_CUDA=ON -DLORABENCH_WITH_NCCL=ON || die "the build against torch $version failed"
  (cd "$dir" && ctest --output-on-failure -j "${LORABENCH_TEST_JOBS:-2}" --timeout 900) ||
    die "tests failed against torch $version"
  echo "gpu_check: lorabench builds and passes its tests against torch $version"
}

# preflight_peers BUILD: the benchmark's Python side as the GPU machine's image has it, run here on the CPU:
# a venv layered on this project's one (its peft, numpy, ... seen through a .pth) with the image's torch
# release and IMAGE_PEERS installed in it, then the benchmark's end-to-end cases `valid` (run_bench.py,
# lorabench against transformers + peft eager, equal work checked) and `profiles` (profile_peer.py eager,
# compiled, fp32, FSDP2 on 2 ranks, and `gpu_check.sh profile` on the CPU) with BUILD's binaries. An API
# difference between the versions the project pins and the image's then fails here, not in the lent minutes.
preflight_peers() {
  local build=$1 base venv site whl
  [[ -x $build/src/app/lorabench && -x $build/bench/lorabench-profile-ops ]] ||
    die "no lorabench or lorabench-profile-ops in $build: scripts/build.sh first"
  base=$("$here/scripts/torch-venv.sh")
  [[ -x $base/bin/python ]] || die "no venv at $base: run scripts/install-deps.sh first"
  site=$(torch_release "$IMAGE_TORCH")
  whl=$(ls "$site/wheel/torch-$IMAGE_TORCH"-*.whl 2>/dev/null | head -n 1)
  if [[ -z $whl ]]; then
    "$base/bin/python" -m pip download --quiet --no-deps --only-binary=:all: -d "$site/wheel" "torch==$IMAGE_TORCH" ||
      die "pip download torch==$IMAGE_TORCH failed (PyPI is needed)"
    whl=$(ls "$site/wheel/torch-$IMAGE_TORCH"-*.whl | head -n 1)
  fi
  venv=$(dirname "$base")/peers-image-torch-$IMAGE_TORCH
  if [[ ! -x $venv/bin/python ]]; then
    "$base/bin/python" -m venv "$venv" || die "cannot make the venv $venv"
    local sp
    sp=$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$sp" >"$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/project_venv.pth"
  fi
  # torch without its dependencies (the nvidia-* libraries come through the project's venv), the rest with
  # theirs; both kept when already there at these versions.
  "$venv/bin/python" -m pip install --quiet --no-deps "$whl" && "$venv/bin/python" -m pip install --quiet "${IMAGE_PEERS[@]}" ||
    die "cannot install torch $IMAGE_TORCH and ${IMAGE_PEERS[*]} into $venv"
  "$venv/bin/python" -c 'import torch, transformers, peft, accelerate
print("gpu_check preflight-peers: torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__,
      "accelerate", accelerate.__version__)' || die "the venv $venv does not import the peers"
  local work=$build/preflight-peers c bin rc=0
  rm -rf "$work"
  for c in valid profiles; do
    bin=$build/src/app/lorabench
    [[ $c == profiles ]] && bin=$build/bench/lorabench-profile-ops
    if "$here/tests/e2e/bench_peers_e2e.sh" "$c" "$venv/bin/python" "$bin" "$here" "$work" >"$work-$c.log" 2>&1; then
      echo "gpu_check preflight-peers: $c passed"
    else
      echo "gpu_check preflight-peers: $c FAILED ($work-$c.log)"; tail -n 20 "$work-$c.log"; rc=1
    fi
  done
  # Liger Kernel's kernels need CUDA, but whether it patches this transformers' Qwen2 (its RMSNorm, MLP,
  # rotary embedding and the fused linear + cross-entropy forward) shows here: the pinned wheel, as carried.
  local liger=$venv-liger
  rm -rf "$liger"
  if "$venv/bin/python" -m pip download --quiet --no-deps --only-binary=:all: -d "$liger/wheel" -r "$WHEELS_REQUIREMENTS" &&
     "$venv/bin/python" -m pip install --quiet --no-deps --target "$liger/site" "$liger"/wheel/*.whl &&
     PYTHONPATH=$liger/site "$venv/bin/python" - <<'PY'
from importlib.metadata import version
from transformers.models.qwen2 import modeling_qwen2 as mq
from liger_kernel.transformers import apply_liger_kernel_to_qwen2
names = ("Qwen2RMSNorm", "Qwen2MLP", "apply_rotary_pos_emb")
before = [getattr(mq, n) for n in names] + [mq.Qwen2ForCausalLM.forward]
apply_liger_kernel_to_qwen2()
after = [getattr(mq, n) for n in names] + [mq.Qwen2ForCausalLM.forward]
missed = [n for n, b, a in zip(names + ("Qwen2ForCausalLM.forward",), before, after) if a is b]
if missed:
    raise SystemExit(f"liger-kernel {version('liger-kernel')} did not patch {', '.join(missed)}")
print(f"gpu_check preflight-peers: liger-kernel {version('liger-kernel')} patches Qwen2's RMSNorm, MLP, rotary "
      "embedding and forward (its kernels need the GPU)")
PY
  then :; else
    echo "gpu_check preflight-peers: liger FAILED"; rc=1
  fi
  return $rc
}

# torch_release VERSION: that release's libtorch (the wheel from PyPI, its include/, lib/ and share/ unpacked
# beside this project's venv, with the venv's nvidia-* libraries linked beside it); prints the directory
# that holds torch/.
torch_release() {
  local version=$1 venv py whl site
  venv=$("$here/scripts/torch-venv.sh")
  py=$venv/bin/python
  [[ -x $py ]] || die "no venv at $venv: run scripts/install-deps.sh first (its nvidia-* wheels are used)"
  site=$(dirname "$venv")/torch-$version-unpacked
  # Unpacked before: kept (unpacking again would touch every header, and every object built against them
  # would be rebuilt).
  if [[ -d $site/torch/lib && $(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$site/torch/version.py" 2>/dev/null) == "$version"* ]]; then
    echo "$site"
    return 0
  fi
  mkdir -p "$site/wheel"
  "$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$site/wheel" "torch==$version" ||
    die "pip download torch==$version failed (PyPI is needed)"
  whl=$(ls "$site/wheel/torch-$version"-*.whl 2>/dev/null | head -n 1)
  [[ -n $whl ]] || die "no torch-$version wheel in $site/wheel"
  rm -rf "$site/torch"
  "$py" - "$whl" "$site" <<'PY' || die "cannot unpack $whl"
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist()
                           if n.startswith(("torch/include/", "torch/lib/", "torch/share/")) or n == "torch/version.py"])
PY
  ln -sfn "$("$py" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))')/nvidia" "$site/nvidia"
  echo "gpu_check: torch $(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$site/torch/version.py") unpacked in $site" >&2
  echo "$site"
}

# pack DIR: `run`'s targets built here, against the image's torch release with `run`'s options, in
# build-gpu-pack/ (LB_GPU_CHECK_PACK_BUILD=BUILD packs an existing build instead: the test's way), copied
# with the build's CTest files to DIR/prebuilt/; its ORIGIN says where it was built (the source tree, the
# build directory and mpiexec, which `run` rewrites there) and the source tree's hash.
pack() {
  local dir=$1 build=${LB_GPU_CHECK_PACK_BUILD:-} torch=""
  if [[ -z $build ]]; then
    build=$here/build-gpu-pack
    torch=$(torch_release "$IMAGE_TORCH")/torch
    # shellcheck source=compiler-cache.sh
    . "$here/scripts/compiler-cache.sh"
    configure_gpu "$build" "$torch" "${lb_cache_args[@]}" >/dev/null || die "configuring $build failed"
    cmake --build "$build" -j "${LORABENCH_JOBS:-2}" --target "${GPU_CHECK_TARGETS[@]}" || die "building $build failed"
  fi
  # The source and build directories as CMake wrote them into the CTest files (which run rewrites there).
  local cache=$build/CMakeCache.txt src_dir build_dir
  src_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$cache" 2>/dev/null)
  build_dir=$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$cache" 2>/dev/null)
  [[ -n $src_dir && -n $build_dir ]] || die "$build is not a configured CMake build"
  [[ $(cd "$src_dir" && pwd -P) == "$(cd "$here" && pwd -P)" ]] || die "$build was configured from $src_dir, not this checkout"
  local packed=$dir/prebuilt t f
  rm -rf "$packed"
  mkdir -p "$packed"
  for t in "${GPU_CHECK_TARGETS[@]}"; do
    f=$(cd "$build" && find . -path ./CMakeFiles -prune -o -type f -name "$t" -perm -u+x -print | head -n 1)
    [[ -n $f ]] || die "no executable $t in $build"
    mkdir -p "$packed/$(dirname "$f")"
    cp -p "$build/$f" "$packed/$f"
  done
  # ctest's files: each directory's CTestTestfile.cmake and what GoogleTest's discovery wrote beside them.
  (cd "$build" && find . -path '*/CMakeFiles' -prune -o \( -name CTestTestfile.cmake -o -name '*_include.cmake' \
     -o -name '*_tests.cmake' \) -print0 | tar cf - --null -T -) | (cd "$packed" && tar xf -) ||
    die "cannot copy the CTest files of $build"
  touch "$packed/.packed"
  {
    echo "tree=$(tree_hash)"
    echo "source=$src_dir"
    echo "build=$build_dir"
    echo "mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")"
    local version_py
    version_py=$(find "$(sed -n 's/^LORABENCH_TORCH:[A-Z]*=//p' "$build/CMakeCache.txt")" -maxdepth 6 \
      -path '*torch/version.py' 2>/dev/null | head -n 1)
    echo "torch=$([[ -n $version_py ]] && sed -n "s/^__version__ = '\(.*\)'/\1/p" "$version_py")"
    echo "date=$(date -u +%FT%TZ)"
  } >"$packed/ORIGIN"
  echo "gpu_check: ${#GPU_CHECK_TARGETS[@]} executables and the CTest files of $build in $packed"
  carry_size "$dir"
}

case "${1:-}" in
  prepare) prepare "${2:-$here/gpu-carry}" ;;
  pack) pack "${2:-$here/gpu-carry}" ;;
  relocate)  # run's first decision alone: the packed build relocated to build-gpu/, or why not (exit 1)
    d=${2:-$here/gpu-carry}
    [[ -f $d/prebuilt/ORIGIN ]] || die "no packed build in $d/prebuilt: run 'scripts/gpu_check.sh pack $d' first"
    unpack "$d"
    eval "$(environment "$d")"  # the carried mpiexec is what the CTest files are rewritten to
    use_prebuilt "$d/prebuilt" "$here/build-gpu" ;;
  preflight) preflight "${2:-$IMAGE_TORCH}" "${3:-$here/build-preflight}" ;;
  preflight-peers) preflight_peers "$(cd "${2:-$here/build}" && pwd)" ;;
  bench) [[ $# -ge 2 ]] || die "usage: scripts/gpu_check.sh bench OUT_DIR [CARRY_DIR]"; bench "$2" "${3:-$here/gpu-carry}" ;;
  profile) [[ $# -ge 2 ]] || die "usage: scripts/gpu_check.sh profile OUT_DIR [CARRY_DIR]"; profile "$2" "${3:-$here/gpu-carry}" ;;
  run) [[ $# -ge 2 ]] || die "usage: scripts/gpu_check.sh run OUT_DIR [CARRY_DIR]"; run "$2" "${3:-$here/gpu-carry}" ;;
  build) [[ $# -ge 2 ]] || die "usage: scripts/gpu_check.sh build OUT_DIR [CARRY_DIR]"; run "$2" "${3:-$here/gpu-carry}" 1 ;;
  env) environment "${2:-$here/gpu-carry}" ;;
  unpack) unpack "${2:-$here/gpu-carry}" ;;  # the first step of run, alone (to test the carry here)
  targets) printf '%s\n' "${GPU_CHECK_TARGETS[@]}" ;;  # what run builds (tests/e2e/gpu_check_targets.sh)
  device-tests) echo "$DEVICE_UNIT_TESTS" ;;           # the unit tests run runs beside the gpu label
  *) sed -n '2,/^set -uo pipefail/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
