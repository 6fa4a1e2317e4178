# Sourced by scripts/build.sh and scripts/sanitize.sh: the compiler cache every build directory shares.
# ccache (installed by scripts/install-deps.sh) keeps compiled objects under
# ${LORABENCH_CCACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/lorabench/ccache}, outside the checkout like the
# libtorch venv, so a fresh clone, a second build directory or the next CI run recompiles only what changed.
# Paths inside the checkout are hashed relative to it (CCACHE_BASEDIR) and the working directory is not
# hashed, so two clones in different places share hits. LORABENCH_CCACHE=0 builds without it.
# Sets lb_cache_args: the CMake options that put ccache in front of the C, C++ and CUDA compilers.
lb_cache_args=()
if [ "${LORABENCH_CCACHE:-1}" != "0" ] && command -v ccache >/dev/null 2>&1; then
  export CCACHE_DIR="${LORABENCH_CCACHE_DIR:-${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lorabench/ccache}}"
  export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  lb_cache_args=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                 -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
