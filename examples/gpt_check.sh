#!/bin/sh
# ember-gpt's ctest check (examples/CMakeLists.txt registers it):
#
#   gpt_check.sh EXE DATA WORKDIR
#
# With a tiny model (2 layers, width 64, context 64) on the CPU, 40 steps:
#   1. a straight run prints a `val loss X` line at steps 0, 20 and 40, the
#      last at least 1 nat below the first, and a `sample:` block of text;
#   2. a run stopped at step 20 with --save, then resumed with --resume,
#      says it resumed at step 20 and logs the same steps, train and val
#      losses and lrs as the straight run, and prints the same sample;
#   3. --help lists every flag and exits 0; bad command lines exit 2 and
#      say what is wrong.
# Exits 77 (ctest's SKIP_RETURN_CODE) when DATA (the fortunes of Debian's
# package fortunes) is missing, 1 with the reason on a failed check.
set -u
exe=$1
data=$2
dir=$3

fail() {
  echo "FAIL: $*"
  exit 1
}

if [ ! -d "$data" ]; then
  echo "skipped: $data is missing (install Debian's package fortunes)"
  exit 77
fi
rm -rf "$dir" && mkdir -p "$dir" || fail "cannot make $dir"

tiny="--device cpu --data $data --layers 2 --width 64 --heads 4 --context 64 --batch-size 16 --lr 3e-3 --steps 40
  --warmup 4 --eval-every 20 --eval-batches 2 --sample 120"
run() {
  out=$1
  shift
  # shellcheck disable=SC2086
  "$exe" $tiny "$@" >"$dir/$out" 2>"$dir/$out.err" || { cat "$dir/$out" "$dir/$out.err"; fail "ember-gpt $* exited with status $?"; }
}

# 1. It learns and prints a sample.
run straight.out --log "$dir/straight.csv"
cat "$dir/straight.out"
awk '
  / val loss / { for (i = 1; i < NF; i++) if ($i == "val" && $(i + 1) == "loss") { n++; if (n == 1) first = $(i + 2); last = $(i + 2) } }
  END {
    if (n != 3) { print "FAIL: " n " val loss lines, not 3 (steps 0, 20, 40)"; exit 1 }
    if (last + 1.0 > first + 0) { print "FAIL: the val loss fell from " first " to " last ", not by 1 nat"; exit 1 }
    print "PASS: val loss " first " -> " last
  }' "$dir/straight.out" || exit 1
sed -n '/^sample:/,$p' "$dir/straight.out" >"$dir/straight.sample"
[ "$(wc -c <"$dir/straight.sample")" -gt 120 ] || fail "no sample: block with 120 bytes of text"

# 2. Stop at step 20, resume, and continue as the straight run did.
run stopped.out --log "$dir/resumed.csv" --save "$dir/run.safetensors" --stop-after 20
grep -q "stopped after step 20 of 40" "$dir/stopped.out" || fail "the stopped run did not say so: $(cat "$dir/stopped.out")"
run resumed.out --log "$dir/resumed.csv" --save "$dir/run.safetensors" --resume "$dir/run.safetensors"
grep -q "resumed from .* at step 20" "$dir/resumed.out" || fail "the resumed run did not say where: $(cat "$dir/resumed.out")"
cut -d, -f1-4 "$dir/straight.csv" >"$dir/straight.numbers"
cut -d, -f1-4 "$dir/resumed.csv" >"$dir/resumed.numbers"
cat "$dir/straight.csv" "$dir/resumed.csv"
[ "$(wc -l <"$dir/straight.numbers")" -eq 4 ] || fail "straight.csv should hold a header and 3 evaluations"
cmp -s "$dir/straight.numbers" "$dir/resumed.numbers" || fail "the stopped and resumed run's log differs from the straight run's"
sed -n '/^sample:/,$p' "$dir/resumed.out" >"$dir/resumed.sample"
cmp -s "$dir/straight.sample" "$dir/resumed.sample" || fail "the resumed run's sample differs from the straight run's"
echo "PASS: stopped at step 20, resumed, and logged and sampled as the straight run"

# 3. The command line.
help=$("$exe" --help) || fail "--help exited with status $?"
for flag in --device --preset --layers --width --heads --context --dropout --data --val-fraction --steps --batch-size \
  --lr --min-lr-ratio --warmup --weight-decay --grad-clip --amp --seed --eval-every --eval-batches --log --save \
  --resume --stop-after --sample --temperature --top-k --prompt --help; do
  echo "$help" | grep -q -- "^  $flag" || fail "--help does not list $flag"
done
bad() {
  expect=$1
  shift
  out=$("$exe" "$@" 2>&1)
  status=$?
  [ "$status" -eq 2 ] || fail "ember-gpt $* exited with status $status, not 2: $out"
  echo "$out" | grep -q -- "$expect" || fail "ember-gpt $* did not say '$expect': $out"
  echo "ok: ember-gpt $* -> $(echo "$out" | head -1)"
}
bad "unknown argument '--bogus'" --bogus
bad "expected one of small gpt2" --preset huge
bad "is not a multiple of --heads 3" --device cpu --width 64 --heads 3
bad "expected a number above 0" --temperature 0
bad "does not exist" --device cpu --data "$dir/no-such-corpus.txt"
bad "without --save the run could not be continued" --device cpu --stop-after 5
bad "was saved by a run with --width 64, but this run has --width 32" --device cpu --data "$data" --layers 2 \
  --width 32 --heads 4 --context 64 --resume "$dir/run.safetensors"
echo "PASS: --help lists every flag; bad command lines exit 2"
