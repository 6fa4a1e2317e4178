#!/usr/bin/env bash
# Configures and builds lorabench (Release, Ninja) into build/ (or $LORABENCH_BUILD_DIR).
#   scripts/build.sh [extra cmake -D options]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${LORABENCH_BUILD_DIR:-$here/build}"
jobs="${LORABENCH_JOBS:-2}"
# shellcheck source=compiler-cache.sh
. "$here/scripts/compiler-cache.sh"
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${LORABENCH_BUILD_TYPE:-Release}" "${lb_cache_args[@]}" "$@"
cmake --build "$build" -j "$jobs"
