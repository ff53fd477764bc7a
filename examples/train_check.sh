#!/bin/sh
# The ctest checks of ember-train (examples/CMakeLists.txt registers them).
#
#   train_check.sh learns   EXE DATA MIN_ACC [ember-train flags...]
#       One run. Passes when the running loss that the progress lines print
#       falls from the first line to the last, the epoch's mean training loss
#       is below 2.0 (chance, uniform logits over 10 classes, is ln 10 = 2.30)
#       and the final test accuracy is at least MIN_ACC percent.
#   train_check.sh resume   EXE DATA WORKDIR [ember-train flags...]
#       Four runs of the given flags plus --epochs 2: two straight runs, and
#       one that stops after epoch 1 with a checkpoint and then resumes from
#       it. Passes when the CSV logs of all of them agree on every number but
#       the seconds column: the run is deterministic and resuming continues it
#       exactly (model, optimizer, schedule and dropout's generator).
#   train_check.sh usage    EXE
#       Bad command lines must exit with status 2 and say what is wrong.
#
# Exits 77 (ctest's SKIP_RETURN_CODE) when the Fashion-MNIST files are not
# in DATA, 1 with the reason on a failed check.
set -u
mode=$1
exe=$2

fail() {
  echo "FAIL: $*"
  exit 1
}

need_data() {
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    if [ ! -f "$1/$f" ] && [ ! -f "$1/$f.gz" ]; then
      echo "skipped: $1/$f(.gz) is missing (install Debian's dataset-fashion-mnist)"
      exit 77
    fi
  done
}

case "$mode" in
  learns)
    data=$3
    min_acc=$4
    shift 4
    need_data "$data"
    out=$("$exe" --data "$data" "$@" 2>&1) || fail "ember-train exited with status $?: $out"
    echo "$out"
    echo "$out" | awk -v min_acc="$min_acc" '
      / loss [0-9.]+ / && / ETA / {
        for (i = 1; i < NF; i++) if ($i == "loss") { if (first == "") first = $(i + 1); last = $(i + 1) }
      }
      /^epoch .*train loss/ { for (i = 1; i < NF; i++) if ($i == "loss") train_loss = $(i + 1) }
      /^test accuracy: / { acc = $3; sub(/%/, "", acc) }
      END {
        if (first == "" || last + 0 >= first + 0) { print "FAIL: the running loss did not fall (" first " -> " last ")"; exit 1 }
        if (train_loss == "" || train_loss + 0 >= 2.0) { print "FAIL: training loss " train_loss " is not below 2.0"; exit 1 }
        if (acc == "" || acc + 0 < min_acc + 0) { print "FAIL: test accuracy " acc "% is below " min_acc "%"; exit 1 }
        print "PASS: running loss " first " -> " last ", training loss " train_loss ", test accuracy " acc "%"
      }'
    ;;
  resume)
    data=$3
    dir=$4
    shift 4
    need_data "$data"
    rm -rf "$dir" && mkdir -p "$dir" || fail "cannot make $dir"
    run() {
      "$exe" --data "$data" --epochs 2 "$@" >"$dir/last.out" 2>&1 || { cat "$dir/last.out"; fail "ember-train $* exited with status $?"; }
    }
    run "$@" --log "$dir/straight1.csv"
    run "$@" --log "$dir/straight2.csv"
    run "$@" --log "$dir/resumed.csv" --checkpoint "$dir/run.safetensors" --stop-after 1
    run "$@" --log "$dir/resumed.csv" --checkpoint "$dir/run.safetensors" --resume "$dir/run.safetensors"
    grep -q "resumed from .* after epoch 1" "$dir/last.out" || fail "the resumed run did not say it resumed: $(cat "$dir/last.out")"
    for f in straight1 straight2 resumed; do
      cut -d, -f1-4,6 "$dir/$f.csv" >"$dir/$f.numbers"
      cat "$dir/$f.csv"
    done
    [ "$(wc -l <"$dir/straight1.numbers")" -eq 3 ] || fail "straight1.csv should hold a header and 2 epochs"
    cmp -s "$dir/straight1.numbers" "$dir/straight2.numbers" || fail "two runs with the same seed differ"
    cmp -s "$dir/straight1.numbers" "$dir/resumed.numbers" || fail "the resumed run differs from the straight run"
    echo "PASS: straight, repeated and resumed runs agree"
    ;;
  usage)
    check() {
      expect=$1
      shift
      out=$("$exe" "$@" 2>&1)
      status=$?
      [ "$status" -eq 2 ] || fail "ember-train $* exited with status $status, not 2: $out"
      echo "$out" | grep -q -- "$expect" || fail "ember-train $* did not say '$expect': $out"
      echo "ok: ember-train $* -> $(echo "$out" | head -1)"
    }
    check "unknown argument '--bogus'" --bogus
    check "usage: ember-train" --bogus
    check "expected one of mlp cnn" --model rnn
    check "expected an integer from 1" --epochs 0
    check "expected an integer from 1" --batch-size -3
    check "expected a number above 0" --lr nan
    check "expected a number above 0" --lr 1e-3x
    check "needs a value" --epochs
    check "expected cpu, cuda, cuda:N or auto" --device gpu
    check "expected one of sgd adam adamw" --optimizer lamb
    check "cannot read" --resume /nonexistent/run.safetensors
    check "does not exist" --log /nonexistent/dir/log.csv
    check "is not a directory" --data /nonexistent/data
    check "without --checkpoint" --epochs 2 --stop-after 1
    "$exe" --help | grep -q -- "--limit-train N" || fail "--help does not list --limit-train"
    echo "PASS: bad command lines exit with status 2"
    ;;
  *)
    fail "unknown mode $mode"
    ;;
esac
