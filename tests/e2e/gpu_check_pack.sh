#!/usr/bin/env bash
# scripts/gpu_check.sh pack, then relocate and build in another checkout, as on the lent machine: the build's
# executables and CTest files travel in the carry and are used there only when they were packed from the
# same source tree and start there; otherwise the reason is said and `build` builds (not run here).
# The packed build is this test's own (CUDA and NCCL, as the one pack makes against the image's torch);
# the other checkout is a copy of this one at another path, so every path in the CTest files must move.
#   gpu_check_pack.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build="$(realpath "$1")" src="$(realpath "$2")" work=$3
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_dir "$work"
work="$(pwd -P)"
# python3 there is the image's, with torch: here the venv's, whose libtorch this build links.
venv=$("$src/scripts/torch-venv.sh")
export PATH="$venv/bin:$PATH"

mkdir -p carry/debs
LB_GPU_CHECK_PACK_BUILD=$build run 0 pack.log "$src/scripts/gpu_check.sh" pack carry
expect_in pack.log "MiB (at most 60)"
mapfile -t targets < <("$src/scripts/gpu_check.sh" targets)
for t in "${targets[@]}"; do
  [[ $(find carry/prebuilt -type f -name "$t" | wc -l) -eq 1 ]] || fail "$t not packed once"
done
[[ -f carry/prebuilt/CTestTestfile.cmake && -f carry/prebuilt/tests/CTestTestfile.cmake ]] || fail "no CTest files packed"
expect_in carry/prebuilt/ORIGIN "source=$src"
expect_in carry/prebuilt/ORIGIN "build=$build"
expect_re carry/prebuilt/ORIGIN '^tree=[0-9a-f]{16}$'

# Another checkout: this one's files at another path, and an mpiexec of its own (the carried one there).
mkdir checkout
(cd "$src" && tar cf - --exclude='./build*' --exclude=./third_party --exclude=./outputs --exclude=./.git \
   --exclude=./gpu-carry --exclude='__pycache__' .) | (cd checkout && tar xf -)
mkdir -p bin
printf '#!/usr/bin/env bash\nexec %s "$@"\n' "$(command -v mpiexec)" >bin/mpiexec
chmod +x bin/mpiexec
export PATH="$work/bin:$PATH"
co=$work/checkout
# A build belongs to the checkout it was configured from: the copy cannot pack this one.
LB_GPU_CHECK_PACK_BUILD=$build run 1 foreign.log "$co/scripts/gpu_check.sh" pack "$work/carry2"
expect_in foreign.log "$build was configured from $src, not this checkout"
run 0 relocate.log "$co/scripts/gpu_check.sh" relocate "$work/carry"
expect_in relocate.log "relocated $work/carry/prebuilt to $co/build-gpu"
expect_re relocate.log '^lorabench [0-9]+\.[0-9]+\.[0-9]+ '
# Every path ctest would run now lies in the new checkout (or is its mpiexec); none in the old one.
(cd "$co/build-gpu" && ctest -L gpu --show-only=json-v1) >gpu.json
python3 - gpu.json "$src" "$build" "$co" "$work/bin/mpiexec" <<'PY' || fail "the relocated gpu tests: see above"
import json, os, sys
tests = json.load(open(sys.argv[1]))["tests"]
src, build, co, mpiexec = sys.argv[2:]
assert tests, "no gpu test"
for t in tests:
    cmd = t["command"]
    for arg in cmd[1:] if cmd[0] == mpiexec else cmd:
        moved = arg == co or arg.startswith(co + "/")
        assert moved or not (arg in (src, build) or arg.startswith((src + "/", build + "/"))), f"{t['name']}: {arg}"
    exe = cmd[0]
    assert exe == mpiexec or exe.startswith(co + "/"), f"{t['name']} runs {exe}"
    assert any(a.startswith(co + "/build-gpu/") for a in cmd), f"{t['name']}: {cmd}"
print(len(tests), "gpu tests, each in", co)
PY
# They run from there: the device unit tests `run` runs beside the gpu label (CPU ones, one under mpiexec).
regex=$("$src/scripts/gpu_check.sh" device-tests)
(cd "$co/build-gpu" && ctest -R "$regex" -V) >unit.log 2>&1 || { cat unit.log >&2; fail "relocated device unit tests"; }
expect_in unit.log "100% tests passed"
expect_in unit.log "$co/build-gpu/tests/test_comm_staging"

# `build` there: the packed build is used (no configure, no build step) and said so.
run 0 build.log "$co/scripts/gpu_check.sh" build "$work/bout" "$work/carry"
expect_in bout/summary.md "| prebuilt | ok (relocated, not built here) |"
expect_in bout/summary.md "build: packed elsewhere by 'gpu_check.sh pack'"
expect_not_in bout/summary.md "| configure |"
expect_not_in bout/summary.md "| build |"

# Sources changed after packing: not used, and said why (build would build; not run here).
echo "// changed" >>"$co/src/app/main.cpp"
run 1 stale.log "$co/scripts/gpu_check.sh" relocate "$work/carry"
expect_re stale.log 'packed from source tree [0-9a-f]{16}, this checkout is [0-9a-f]{16}'
sed -i '$d' "$co/src/app/main.cpp"

# A lorabench that does not start there (a missing library): not used, said why, the relocated copy removed.
cp "$work/carry/prebuilt/src/app/lorabench" lorabench.orig
printf '#!/bin/sh\necho "lorabench: error while loading shared libraries: libtorch_cuda.so" >&2\nexit 127\n' \
  >"$work/carry/prebuilt/src/app/lorabench"
rm -rf "$co/build-gpu"
run 1 broken.log "$co/scripts/gpu_check.sh" relocate "$work/carry"
expect_in broken.log "its lorabench does not start here: lorabench: error while loading shared libraries"
[[ ! -e $co/build-gpu ]] || fail "an unusable packed build was left in $co/build-gpu"
echo "ok: packed ${#targets[@]} executables, relocated to another checkout, its tests ran there; refused when stale or broken"
