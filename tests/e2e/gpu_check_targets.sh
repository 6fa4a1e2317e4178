#!/usr/bin/env bash
# scripts/gpu_check.sh run builds only its own target list on the lent GPU machine (the whole build would
# take much of its minutes). Every executable that a gpu-labelled test or one of the device unit tests
# `run` selects would execute must be in that list, and every name in it must be a target of this build;
# otherwise a new or renamed test would fail there as "not found", in minutes that cannot be had again.
#   gpu_check_targets.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
mapfile -t targets < <("$src/scripts/gpu_check.sh" targets)
regex=$("$src/scripts/gpu_check.sh" device-tests)
[[ ${#targets[@]} -gt 0 && -n $regex ]] || fail "gpu_check.sh printed no targets or no device test regex"
json=$(mktemp)
trap 'rm -f "$json"' EXIT
known=$(cmake --build "$build" --target help | sed 's/^\.\.\. //; s/:.*//; s/ .*//')  # Ninja's or Make's list
for t in "${targets[@]}"; do
  grep -qxF "$t" <<<"$known" || fail "gpu_check.sh's target $t is not a target of this build"
done
for sel in "-L gpu" "-R $regex"; do
  # shellcheck disable=SC2086
  (cd "$build" && ctest $sel --show-only=json-v1) >"$json"
  python3 - "$json" "$build" "${targets[@]}" <<'PY' || fail "ctest $sel: see above"
import json, os, sys
build = os.path.realpath(sys.argv[2])
targets = set(sys.argv[3:])
tests = json.load(open(sys.argv[1]))["tests"]
if not tests:
    sys.exit("no tests selected")
missing = set()
for t in tests:
    for arg in t.get("command", []):
        # An executable of this build (ctest names them by absolute path), not an option, a script of the
        # source tree, mpirun or a system tool.
        p = os.path.realpath(arg) if os.path.isabs(arg) else ""
        if p.startswith(build + os.sep) and not p.endswith(".sh"):
            name = os.path.basename(p)
            if name not in targets:
                missing.add(f"{name} (run by {t['name']})")
if missing:
    sys.exit("not in gpu_check.sh's targets: " + ", ".join(sorted(missing)))
print(f"{len(tests)} tests, every executable among gpu_check.sh's targets")
PY
done
echo ok
