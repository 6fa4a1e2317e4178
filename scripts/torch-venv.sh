#!/usr/bin/env bash
# Prints the path of the libtorch virtual environment (the one scripts/install-deps.sh fills and CMake
# builds against by default): $LORABENCH_VENV, else ${XDG_CACHE_HOME:-~/.cache}/lorabench/torch-<version>.
# It lives outside the checkout so that every clone and every later run reuses it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=torch-version.env
. "$here/scripts/torch-version.env"
echo "${LORABENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/lorabench/torch-$LORABENCH_TORCH_VERSION}"
