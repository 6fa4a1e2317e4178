#!/bin/sh
# lorabench-report must never link libtorch (the postprocess tool stays light: it reads HDF5 and links no libtorch). Fails when ldd
# lists libtorch* or libc10* among the binary's shared libraries, or when ldd cannot read it.
#   report_no_libtorch.sh PATH/TO/lorabench-report
set -eu
bin=$1
libs=$(ldd "$bin") || { echo "FAIL: ldd cannot read $bin" >&2; exit 1; }
echo "$libs"
if echo "$libs" | grep -Eq '(^|[[:space:]/])lib(torch|c10)[^[:space:]]*\.so'; then
  echo "FAIL: $bin links libtorch:" >&2
  echo "$libs" | grep -E 'lib(torch|c10)' >&2
  exit 1
fi
# The check itself must be able to fail: ldd printed at least the C library.
echo "$libs" | grep -q 'libc\.so' || { echo "FAIL: unexpected ldd output" >&2; exit 1; }
echo "ok: no libtorch/libc10 in $bin"
