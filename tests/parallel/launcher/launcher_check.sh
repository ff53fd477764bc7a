#!/bin/sh
# The ctest checks of ember-run (tests/CMakeLists.txt and examples/CMakeLists.txt
# register them). The ranks are small sh scripts, except in `demo`. ember-run
# serves a store on its port, and ctest runs these checks in parallel, so
# every launch that does not test the port itself takes --standalone's free
# one.
#
#   launcher_check.sh output     EMBER_RUN
#       Each rank's variables (one and two nodes), its stdout and stderr lines
#       prefixed with "[rank K] " on ember-run's stdout and stderr, a last line
#       without a newline, exit status 0.
#   launcher_check.sh failure    EMBER_RUN DIR
#       Rank 1 exits 7 while the others run (one ignores SIGTERM, one has a
#       child of its own): ember-run reaps rank 1 at once (no zombie), stops
#       the others (SIGKILL after the grace period for the one ignoring
#       SIGTERM), exits 7, and no process of the job is left.
#   launcher_check.sh signal     EMBER_RUN DIR
#       SIGTERM to ember-run reaches the ranks; it exits 143 with no process
#       left. A rank killed by SIGSEGV makes ember-run exit 139.
#   launcher_check.sh standalone EMBER_RUN
#       --standalone gives every rank 127.0.0.1 and the same free port.
#   launcher_check.sh usage      EMBER_RUN
#       Bad command lines exit 2 and say what is wrong; --help exits 0; a
#       program that does not exist makes ember-run exit 127.
#   launcher_check.sh demo       EMBER_RUN DEMO
#       examples/distributed_demo under ember-run: 3 ranks all_reduce and
#       finish; then rank 1 crashes mid-loop: ember-run exits non-zero and no
#       rank is left. Exits 77 (skip) when ember has no gloo backend.
#   launcher_check.sh dies       EMBER_RUN DEMO RANK
#       3 ranks of distributed_demo, which ignore SIGTERM (so that they end on
#       their own); rank RANK crashes (status 3) before all_reduce #3. Every
#       other rank fails that all_reduce with an error naming rank RANK as the
#       one that did not arrive, rank 0 dying included: ember-run serves the
#       store, so it outlives rank 0. Exits 77 without gloo.
#   launcher_check.sh torchrun   FAKE_TORCHRUN DEMO
#       distributed_demo's 3 ranks under scripts/fake_torchrun.py, which hosts
#       a PyTorch TCPStore (python3-torch 1.13) and sets the variables torchrun's
#       agent sets (TORCHELASTIC_USE_AGENT_STORE=True): the ranks meet in that
#       store and all_reduce. Exits 77 without a python3 that imports torch, or
#       without gloo.
#   launcher_check.sh nodes      EMBER_RUN DEMO DIR
#       Two ember-runs on this machine as the two nodes of one job (--nnodes 2,
#       --node-rank 1 started first, 2 ranks each, one free port): the 4 ranks
#       all_reduce across both, and both ember-runs exit 0. Exits 77 without
#       gloo.
set -u
mode=$1
run=$2

fail() {
  echo "FAIL: $*"
  exit 1
}

# Whether a process exists and is not a zombie.
alive() {
  [ -r "/proc/$1/stat" ] || return 1
  state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$state" ] && [ "$state" != Z ]
}

none_alive() {
  for f in "$@"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if alive "$pid"; then
      fail "process $pid ($f) is still running after ember-run exited"
    fi
  done
}

fresh_dir() {
  rm -rf "$1" && mkdir -p "$1" || fail "cannot make $1"
}

case "$mode" in
  output)
    out=$("$run" --nproc-per-node 3 --master-port 29999 sh -c \
      'echo "env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT"; echo "to stderr $RANK" >&2; printf "no newline $RANK"' \
      2>/tmp/ember_run_err.$$)
    rc=$?
    err=$(cat /tmp/ember_run_err.$$)
    rm -f /tmp/ember_run_err.$$
    echo "$out"
    echo "$err"
    [ $rc -eq 0 ] || fail "exit status $rc, expected 0"
    for r in 0 1 2; do
      echo "$out" | grep -qx "\[rank $r\] env $r $r 3 3 0 127.0.0.1 29999" || fail "rank $r's variables are missing"
      echo "$out" | grep -qx "\[rank $r\] no newline $r" || fail "rank $r's last line is missing"
      echo "$err" | grep -qx "\[rank $r\] to stderr $r" || fail "rank $r's stderr line is missing from stderr"
      echo "$out" | grep -q "to stderr" && fail "stderr lines went to stdout"
    done
    out=$("$run" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr node0 --master-port=1234 sh -c \
      'echo "env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT"') ||
      fail "the two-node run failed"
    echo "$out"
    echo "$out" | grep -qx "\[rank 2\] env 2 0 4 2 1 node0 1234" || fail "node 1's first rank is not rank 2"
    echo "$out" | grep -qx "\[rank 3\] env 3 1 4 2 1 node0 1234" || fail "node 1's second rank is not rank 3"
    echo "PASS: variables and prefixed output"
    ;;
  failure)
    dir=$3
    fresh_dir "$dir"
    start=$(date +%s)
    "$run" --standalone --nproc-per-node 3 --grace-period 2 sh -c '
      echo $$ > '"$dir"'/rank$RANK.pid
      case $RANK in
        0) trap "" TERM; sleep 30 ;;
        1) sleep 0.3; exit 7 ;;
        2) sleep 30 & echo $! > '"$dir"'/child2.pid; wait ;;
      esac' &
    launcher=$!
    sleep 1.2
    # Rank 1 has exited; ember-run is in its grace period (rank 0 ignores SIGTERM).
    alive $launcher || fail "ember-run ended before the grace period was over"
    [ -f "$dir/rank1.pid" ] || fail "rank 1 did not start"
    [ -r "/proc/$(cat "$dir/rank1.pid")/stat" ] && fail "rank 1 exited but was not reaped (a zombie)"
    wait $launcher
    rc=$?
    took=$(($(date +%s) - start))
    [ $rc -eq 7 ] || fail "exit status $rc, expected rank 1's 7"
    [ $took -ge 2 ] || fail "ember-run exited after ${took}s, before the 2 s grace period"
    [ $took -le 10 ] || fail "ember-run took ${took}s"
    none_alive "$dir"/rank0.pid "$dir"/rank1.pid "$dir"/rank2.pid "$dir"/child2.pid
    echo "PASS: rank 1's status 7 propagated, the others stopped, nothing left (${took}s)"
    ;;
  signal)
    dir=$3
    fresh_dir "$dir"
    "$run" --standalone --nproc-per-node 2 sh -c 'echo $$ > '"$dir"'/rank$RANK.pid; sleep 30 & echo $! > '"$dir"'/child$RANK.pid; wait' &
    launcher=$!
    for i in 1 2 3 4 5 6 7 8 9 10; do
      [ -f "$dir/child0.pid" ] && [ -f "$dir/child1.pid" ] && break
      sleep 0.2
    done
    kill -TERM $launcher
    wait $launcher
    rc=$?
    [ $rc -eq 143 ] || fail "exit status $rc after SIGTERM, expected 143"
    none_alive "$dir"/rank0.pid "$dir"/rank1.pid "$dir"/child0.pid "$dir"/child1.pid
    "$run" --standalone --nproc-per-node 2 sh -c 'if [ $RANK = 0 ]; then kill -SEGV $$; fi; sleep 30'
    rc=$?
    [ $rc -eq 139 ] || fail "exit status $rc for a rank killed by SIGSEGV, expected 139"
    echo "PASS: SIGTERM forwarded (143), a rank's signal propagated (139), nothing left"
    ;;
  standalone)
    out=$("$run" --standalone --nproc-per-node 2 sh -c 'echo "addr $MASTER_ADDR $MASTER_PORT"') || fail "exit status $?"
    echo "$out"
    ports=$(echo "$out" | sed -n 's/^\[rank [01]\] addr 127\.0\.0\.1 \([0-9][0-9]*\)$/\1/p' | sort -u)
    [ "$(echo "$out" | grep -c 'addr 127.0.0.1 ')" -eq 2 ] || fail "the ranks did not get 127.0.0.1"
    [ "$(echo "$ports" | wc -l)" -eq 1 ] && [ -n "$ports" ] || fail "the ranks got different ports: $ports"
    echo "PASS: --standalone picked port $ports"
    ;;
  usage)
    expect_usage() {  # expected text, then the arguments
      text=$1
      shift
      out=$("$run" "$@" 2>&1)
      rc=$?
      [ $rc -eq 2 ] || fail "ember-run $* exited with status $rc, expected 2: $out"
      echo "$out" | grep -q -- "$text" || fail "ember-run $* did not say '$text': $out"
      echo "ok: ember-run $* -> $(echo "$out" | head -1)"
    }
    expect_usage "no program to run"
    expect_usage "no program to run" --nproc-per-node 2
    expect_usage "unknown option '--bogus'" --bogus true
    expect_usage "--nproc-per-node needs a value" --nproc-per-node
    expect_usage "--nproc-per-node takes an integer" --nproc-per-node 0 true
    expect_usage "--nproc-per-node takes an integer" --nproc-per-node two true
    expect_usage "--master-port takes an integer in \[1, 65535\]" --master-port 70000 true
    expect_usage "--node-rank 2 is not below --nnodes 2" --nnodes 2 --node-rank 2 true
    expect_usage "--standalone runs one node" --standalone --nnodes 2 true
    expect_usage "--standalone picks the address and port itself" --standalone --master-port 1234 true
    expect_usage "--grace-period takes seconds" --grace-period -1 true
    out=$("$run" --help) || fail "--help exited with status $?"
    echo "$out" | grep -q "usage: ember-run" || fail "--help printed no usage"
    out=$("$run" --standalone --nproc-per-node 1 /nonexistent/program 2>&1)
    rc=$?
    [ $rc -eq 127 ] || fail "a missing program gave status $rc, expected 127"
    echo "$out" | grep -q "\[rank 0\] ember-run: cannot execute '/nonexistent/program'" || fail "no exec error: $out"
    # Everything after the program is the program's, options included.
    out=$("$run" --standalone --nproc-per-node 1 echo --nproc-per-node 7) || fail "exit status $?"
    [ "$out" = "[rank 0] --nproc-per-node 7" ] || fail "the program's arguments were not passed on: $out"
    echo "PASS: usage errors"
    ;;
  demo)
    demo=$3
    out=$("$run" --standalone --nproc-per-node 3 "$demo" --steps 4 --timeout-ms 5000 2>&1)
    rc=$?
    echo "$out"
    if echo "$out" | grep -q "built without Gloo"; then
      echo "skipped: this ember has no gloo backend"
      exit 77
    fi
    [ $rc -eq 0 ] || fail "the demo exited with status $rc"
    echo "$out" | grep -qx "\[rank 0\] step 3: all_reduce sum = 12" || fail "rank 0 did not print step 3's sum"
    for r in 0 1 2; do
      echo "$out" | grep -qx "\[rank $r\] rank $r: done" || fail "rank $r did not finish"
    done
    out=$("$run" --standalone --nproc-per-node 3 --grace-period 1 "$demo" --steps 21 --fail-rank 1 --fail-step 2 \
      --timeout-ms 5000 2>&1)
    rc=$?
    echo "$out"
    [ $rc -ne 0 ] || fail "ember-run exited 0 although rank 1 crashed"
    echo "$out" | grep -q "\[rank 1\] rank 1: simulating a crash at step 2" || fail "rank 1 did not crash"
    echo "$out" | grep -q "rank [0-9]: done" && fail "a rank finished although rank 1 crashed at step 2"
    for cmdline in /proc/[0-9]*/cmdline; do
      tr '\0' ' ' <"$cmdline" 2>/dev/null | grep -q "^$demo --steps 21 " && fail "a rank of the crashed job is still running"
    done
    echo "PASS: the demo runs under ember-run; a crash fails the job (status $rc)"
    ;;
  dies)
    demo=$3
    dying=$4
    out=$("$run" --standalone --nproc-per-node 3 --grace-period 20 sh -c 'trap "" TERM; exec "$0" "$@"' \
      "$demo" --steps 20 --fail-rank "$dying" --fail-step 2 --timeout-ms 4000 2>&1)
    rc=$?
    echo "$out"
    if echo "$out" | grep -q "built without Gloo"; then
      echo "skipped: this ember has no gloo backend"
      exit 77
    fi
    [ $rc -eq 3 ] || fail "ember-run exited with status $rc, expected the crashed rank's 3"
    for r in 0 1 2; do
      [ $r -eq "$dying" ] && continue
      line=$(echo "$out" | grep "^\[rank $r\] rank $r: gloo all_reduce #3 ") || fail "rank $r did not fail all_reduce #3"
      echo "$line" | grep -q "did not arrive at #3 (last collective started: \(.*, \)\?rank $dying #2 all_reduce" ||
        fail "rank $r's error does not name rank $dying as missing from all_reduce #3"
    done
    echo "$out" | grep -q "store cannot be reached\|rank 0 has probably exited" && fail "a rank lost the store"
    echo "PASS: rank $dying died; every other rank named it and all_reduce #3"
    ;;
  torchrun)
    fake=$2
    demo=$3
    python=""
    for p in python3 /usr/bin/python3; do
      if "$p" -c 'import torch.distributed' >/dev/null 2>&1; then python=$p && break; fi
    done
    if [ -z "$python" ]; then
      echo "skipped: no python3 imports torch (apt-get install python3-torch)"
      exit 77
    fi
    out=$("$python" "$fake" --standalone --nproc-per-node 3 "$demo" --steps 4 --timeout-ms 20000 2>&1)
    rc=$?
    echo "$out"
    if echo "$out" | grep -q "built without Gloo"; then
      echo "skipped: this ember has no gloo backend"
      exit 77
    fi
    [ $rc -eq 0 ] || fail "the demo under the fake torchrun agent exited with status $rc"
    echo "$out" | grep -qx "step 3: all_reduce sum = 12" || fail "rank 0 did not print step 3's sum"
    for r in 0 1 2; do echo "$out" | grep -qx "rank $r: done" || fail "rank $r did not finish"; done
    echo "PASS: 3 ranks met in PyTorch's TCPStore ($("$python" -c 'import torch; print(torch.__version__)'))"
    ;;
  nodes)
    demo=$3
    dir=$4
    fresh_dir "$dir"
    # A free port: the one --standalone picks (free again once that run has ended).
    port=$("$run" --standalone sh -c 'echo $MASTER_PORT' | sed 's/^\[rank 0\] //')
    [ -n "$port" ] || fail "no free port"
    "$run" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-port "$port" "$demo" --steps 3 --timeout-ms 30000 \
      >"$dir/node1" 2>&1 &
    node1=$!
    "$run" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-port "$port" "$demo" --steps 3 --timeout-ms 30000 \
      >"$dir/node0" 2>&1
    rc0=$?
    wait $node1
    rc1=$?
    cat "$dir/node0" "$dir/node1"
    if grep -q "built without Gloo" "$dir/node0"; then
      echo "skipped: this ember has no gloo backend"
      exit 77
    fi
    [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "node 0's ember-run exited with $rc0, node 1's with $rc1"
    grep -qx "\[rank 0\] rank 0 of 4 joined" "$dir/node0" || fail "rank 0 did not join a job of 4"
    grep -qx "\[rank 0\] step 2: all_reduce sum = 14" "$dir/node0" || fail "rank 0 did not print step 2's sum"
    for r in 0 1; do grep -qx "\[rank $r\] rank $r: done" "$dir/node0" || fail "rank $r did not finish on node 0"; done
    for r in 2 3; do grep -qx "\[rank $r\] rank $r: done" "$dir/node1" || fail "rank $r did not finish on node 1"; done
    echo "PASS: two ember-runs as two nodes on port $port; 4 ranks all_reduced"
    ;;
  *)
    fail "unknown mode $mode"
    ;;
esac
