#!/bin/sh
# tokenize_check.sh LORABENCH TOKENIZER_JSON: `lorabench tokenize` in its three modes, and a bad line.
set -u
bin="$1"
tok="$2"
fail=0
check() {  # check NAME EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then echo "ok: $1"; else printf 'FAIL: %s\n  expected: %s\n  got:      %s\n' "$1" "$2" "$3"; fail=1; fi
}
if [ ! -f "$tok" ]; then
  echo "FAIL: $tok is missing: run scripts/install-deps.sh"
  exit 1
fi
out=$(printf 'Hello world\n"\\u4f60\\u597d\\uff0c\\u4e16\\u754c\\uff01"\n' | "$bin" tokenize --tokenizer "$tok")
check "text" "$(printf '[9707,1879]\n[108386,3837,99489,6313]')" "$out"
out=$(printf '[{"role":"user","content":"Hi!"},{"role":"assistant","content":"Hello world"}]\n' |
      "$bin" tokenize --tokenizer "$tok" --chat)
check "chat" "[151644,8948,198,2610,525,1207,16948,11,3465,553,54364,14817,13,1446,525,264,10950,17847,13,151645,198,151644,872,198,13048,0,151645,198,151644,77091,198,9707,1879,151645,198]" "$out"
out=$(printf '[9707,1879,151645]\n' | "$bin" tokenize --tokenizer "$tok" --decode)
check "decode" '"Hello world<|im_end|>"' "$out"
err=$(printf '[1]\nnot json\n' | "$bin" tokenize --tokenizer "$tok" --decode 2>&1 >/dev/null)
rc=$?
check "bad line exit code" "2" "$rc"
case "$err" in *"stdin:2:"*) echo "ok: bad line names stdin:2" ;; *) echo "FAIL: bad line message: $err"; fail=1 ;; esac
exit $fail
