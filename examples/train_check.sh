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
#   train_check.sh distributed  EXE DATA MIN_ACC RUN NPROC [ember-train flags...]
#       The `learns` check of a distributed run: NPROC ranks under ember-run
#       (RUN). Also passes only when ember-run exits 0, rank 0 alone printed
#       on stdout and "test accuracy" came exactly once.
#   train_check.sh matches  EXE DATA MAX_DIFF RUN NPROC GLOBAL_BATCH [ember-train flags...]
#       One process with --batch-size GLOBAL_BATCH and NPROC ranks with
#       GLOBAL_BATCH / NPROC each (the same global batch): their test
#       accuracies differ by at most MAX_DIFF points.
#   train_check.sh fault    EXE DATA RUN DIR kill|stop [ember-train flags...]
#       Two ranks under ember-run; once training is under way, rank 1 is
#       killed (SIGKILL: a crash) or stopped (SIGSTOP: a hang). Passes when
#       ember-run exits non-zero and no rank is left; for a hang, also when
#       rank 0 failed with the process group's timeout error (the flags set
#       --dist-timeout) and the job ended within that timeout plus 10 s.
#
# Exits 77 (ctest's SKIP_RETURN_CODE) when the Fashion-MNIST files are not
# in DATA, 1 with the reason on a failed check.
set -u
mode=$1
exe=$2
data_err=/tmp/ember_train_check_err.$$
trap 'rm -f "$data_err"' EXIT

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

# Reads ember-train's output; passes when the running loss fell, the
# epoch's training loss is below 2.0 and the test accuracy is at least $1%.
check_learning() {
  awk -v min_acc="$1" '
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
}

case "$mode" in
  learns)
    data=$3
    min_acc=$4
    shift 4
    need_data "$data"
    out=$("$exe" --data "$data" "$@" 2>&1) || fail "ember-train exited with status $?: $out"
    echo "$out"
    echo "$out" | check_learning "$min_acc"
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
    check "the mlp has no BatchNorm" --sync-bn
    check "the mlp has no convolution" --channels-last
    check "expected an integer from 1" --dist-timeout 0
    if [ -z "${RANK:-}${WORLD_SIZE:-}${OMPI_COMM_WORLD_RANK:-}${SLURM_PROCID:-}" ]; then
      check "--distributed: env:// initialization: no launcher variables found" --distributed --data /
    fi
    "$exe" --help | grep -q -- "--limit-train N" || fail "--help does not list --limit-train"
    echo "PASS: bad command lines exit with status 2"
    ;;
  distributed)
    data=$3
    min_acc=$4
    run=$5
    nproc=$6
    shift 6
    need_data "$data"
    out=$("$run" --standalone --nproc-per-node "$nproc" "$exe" --data "$data" "$@" 2>"$data_err") ||
      { cat "$data_err"; fail "ember-run exited with status $?: $out"; }
    echo "$out"
    cat "$data_err"
    others=$(echo "$out" | grep -v '^\[rank 0\] ')
    [ -z "$others" ] || fail "ranks other than 0 printed on stdout: $others"
    [ "$(echo "$out" | grep -c '^\[rank 0\] test accuracy: ')" -eq 1 ] || fail "\"test accuracy\" was not printed once"
    (echo "$out"; cat "$data_err") | sed 's/^\[rank 0\] //' | check_learning "$min_acc"
    ;;
  matches)
    data=$3
    max_diff=$4
    run=$5
    nproc=$6
    global=$7
    shift 7
    need_data "$data"
    accuracy() { sed -n 's/^\(\[rank 0\] \)\{0,1\}test accuracy: \([0-9.]*\)%$/\2/p'; }
    one=$("$exe" --data "$data" --batch-size "$global" "$@" 2>/dev/null | accuracy)
    many=$("$run" --standalone --nproc-per-node "$nproc" "$exe" --data "$data" --batch-size $((global / nproc)) "$@" \
      2>/dev/null | accuracy)
    [ -n "$one" ] && [ -n "$many" ] || fail "a run printed no test accuracy (one process: '$one', $nproc ranks: '$many')"
    echo "one process, batch $global: $one%; $nproc ranks, batch $((global / nproc)) each: $many%"
    awk -v a="$one" -v b="$many" -v m="$max_diff" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= m) }' ||
      fail "the accuracies differ by more than $max_diff points"
    echo "PASS: within $max_diff points"
    ;;
  fault)
    data=$3
    run=$4
    dir=$5
    how=$6
    shift 6
    need_data "$data"
    rm -rf "$dir" && mkdir -p "$dir" || fail "cannot make $dir"
    "$run" --standalone --nproc-per-node 2 --grace-period 1 "$exe" --data "$data" "$@" >"$dir/out" 2>&1 &
    launcher=$!
    # The ranks are ember-run's children; rank 1 is the one with RANK=1.
    rank1=""
    i=0
    while [ $i -lt 300 ] && [ -z "$rank1" ]; do
      if grep -q "ETA" "$dir/out"; then
        for p in /proc/[0-9]*; do
          [ "$(sed 's/^.*) //' "$p/stat" 2>/dev/null | cut -d' ' -f2)" = "$launcher" ] || continue
          tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "RANK=1" && rank1=${p#/proc/}
        done
      fi
      [ -n "$rank1" ] || sleep 0.1
      i=$((i + 1))
    done
    [ -n "$rank1" ] || { kill "$launcher"; cat "$dir/out"; fail "training did not get under way (or rank 1 was not found)"; }
    ranks=$(for p in /proc/[0-9]*; do
      [ "$(sed 's/^.*) //' "$p/stat" 2>/dev/null | cut -d' ' -f2)" = "$launcher" ] && echo "${p#/proc/}"
    done)
    start=$(date +%s)
    if [ "$how" = kill ]; then
      kill -KILL "$rank1"
      done_to="killed"
    else
      kill -STOP "$rank1"
      done_to="stopped"
    fi
    wait "$launcher"
    rc=$?
    took=$(($(date +%s) - start))
    cat "$dir/out"
    [ $rc -ne 0 ] || fail "ember-run exited 0 although rank 1 was $done_to"
    for pid in $ranks; do
      if [ -r "/proc/$pid/stat" ]; then
        state=$(sed 's/^.*) //' "/proc/$pid/stat" | cut -d' ' -f1)
        [ "$state" = Z ] || fail "rank process $pid is still running (state $state)"
      fi
    done
    if [ "$how" = stop ]; then
      grep -q "\[rank 0\] ember-train: error: gloo .* failed on rank 0 of 2 .*timeout" "$dir/out" ||
        fail "rank 0 did not fail with the process group's timeout error"
      timeout_s=$(echo "$@" | sed -n 's/.*--dist-timeout \([0-9]*\).*/\1/p')
      [ $took -le $((timeout_s + 10)) ] || fail "the job took ${took}s to end, more than --dist-timeout $timeout_s + 10 s"
    fi
    echo "PASS: rank 1 $done_to; ember-run exited $rc after ${took}s, no rank left"
    ;;
  *)
    fail "unknown mode $mode"
    ;;
esac
