#!/bin/sh
# The ctest check of benchmarks/dp_vs_ddp (benchmarks/CMakeLists.txt
# registers it), on a GPT of one layer, width 16, so that it runs in about a
# second and keeps the benchmark from rotting:
#
#   dp_vs_ddp_check.sh EXE RUN DIR
#
# 1. single, dp-classic and dp-fast on 2 CPU replicas in fp32 and amp exit 0
#    and append 6 rows to DIR/check.csv after its header;
# 2. ddp on 2 gloo ranks under ember-run (RUN) exits 0 and appends 2 rows,
#    whose DDP columns (sync, no_sync, all-reduce ms) are filled;
# 3. every line of the CSV has the header's number of fields;
# 4. a bad flag exits 2 and --modes ddp without a launcher too.
# Exits 1 with the reason on a failed check.
set -u
exe=$1
run=$2
dir=$3
csv=$dir/check.csv
fail() {
  echo "FAIL: $*"
  exit 1
}
mkdir -p "$dir" && rm -f "$csv"
tiny="--model gpt --gpt-layers 1 --gpt-width 16 --gpt-heads 2 --gpt-context 8 --gpt-vocab 32 --batch 2 --steps 2
  --warmup 1 --device cpu --csv $csv"
# shellcheck disable=SC2086
"$exe" $tiny --devices 2 || fail "the single-process modes exited $?"
[ "$(wc -l <"$csv")" -eq 7 ] || fail "expected a header and 6 rows in $csv, got: $(cat "$csv")"
# shellcheck disable=SC2086
"$run" --standalone --nproc-per-node 2 "$exe" $tiny --modes ddp || fail "ddp under ember-run exited $?"
[ "$(wc -l <"$csv")" -eq 9 ] || fail "expected 2 ddp rows more in $csv, got: $(cat "$csv")"
awk -F, 'NR == 1 { n = NF; for (i = 1; i <= NF; ++i) col[$i] = i; next }
  NF != n { print "line " NR " has " NF " fields, the header " n; bad = 1 }
  $col["mode"] == "ddp" && ($col["ddp_sync_ms"] == "" || $col["ddp_no_sync_ms"] == "" || $col["allreduce_ms"] == "") {
    print "ddp row " NR " lacks its DDP columns"; bad = 1 }
  END { exit bad }' "$csv" || fail "malformed $csv: $(cat "$csv")"
"$exe" --steps 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--steps 0 must be a usage error (exit 2)"
"$exe" --modes ddp >/dev/null 2>&1
[ $? -eq 2 ] || fail "--modes ddp without a launcher must be a usage error (exit 2)"
echo "dp_vs_ddp checks passed"
