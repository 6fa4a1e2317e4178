#!/usr/bin/env bash
# `scripts/fuzz.sh check` must give the same run twice (what keeps CI from failing by chance): the same
# executions and the same coverage and features at the end. With address-space randomisation on, two runs
# of fuzz_tokenizer under one seed ended at different coverage (2140/5503 and 2147/5614 edges/features).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
t=${1:-fuzz_tokenizer}
a=$("$here/scripts/fuzz.sh" check "$t")
b=$("$here/scripts/fuzz.sh" check "$t")
echo "$a"
echo "$b"
fp() { awk '{ for (i = 1; i <= NF; i++) if ($i == "cov:" || $i == "ft:") printf "%s %s ", $i, $(i+1); else if ($i == "execs") printf "execs %s ", $(i-1) }' <<<"$1"; }
[ -n "$(fp "$a")" ] || { echo "no coverage figures in the check's output"; exit 1; }
if [ "$(fp "$a")" != "$(fp "$b")" ]; then
  echo "two checks of $t differ: $(fp "$a") / $(fp "$b")"
  exit 1
fi
echo "two checks of $t: identical ($(fp "$a"))"
