#!/bin/sh
# ember-train under torchrun (PyTorch 2.x), started as any non-Python
# program is (`torchrun --no-python ...`): its ranks join the store that
# torchrun's agent hosts (TORCHELASTIC_USE_AGENT_STORE=True), speaking
# PyTorch's TCPStore protocol. Runs a few training steps on the CPU with gloo
# at 2 and 3 ranks and on the GPU with nccl at 1 rank, each under
# `torchrun --standalone` and under `torchrun --rdzv-backend c10d`, checks
# each exit status and prints a table. Exits 1 when a case failed.
#
#   scripts/torchrun_check.sh [BUILD_DIR [DATA_DIR]]     # defaults: build, /usr/share/datasets/fashion-mnist
#
# ember's libraries must load as for any run (e.g. LD_LIBRARY_PATH=/opt/emberdeps/lib
# for a Gloo built there). TORCHRUN overrides the launcher command (default: torchrun, else
# python3 -m torch.distributed.run); GPU=0 skips the nccl cases. Where only
# PyTorch 1.13 is installed, TORCHRUN="python3 scripts/fake_torchrun.py"
# stands in for the agent (a 1.13 TCPStore, the variables torch 2.x sets).
set -u
build=${1:-build}
data=${2:-/usr/share/datasets/fashion-mnist}
train=$build/examples/ember-train
[ -x "$train" ] || { echo "no $train: build ember first (ninja -C $build example_train)"; exit 1; }
if [ -z "${TORCHRUN:-}" ]; then
  if command -v torchrun >/dev/null; then TORCHRUN=torchrun; else TORCHRUN="python3 -m torch.distributed.run"; fi
fi
gpu=${GPU:-1}
if [ "$gpu" = 1 ] && ! command -v nvidia-smi >/dev/null; then gpu=0; fi
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
port=$((29400 + $$ % 500))
results=""
failed=0

# One case: name, nproc, device, then the mode (standalone | c10d).
run_case() {
  name=$1 nproc=$2 device=$3 mode=$4
  if [ "$mode" = standalone ]; then
    rdzv="--standalone"
  else
    port=$((port + 1))
    rdzv="--rdzv-backend c10d --rdzv-endpoint localhost:$port --nnodes 1"
  fi
  start=$(date +%s)
  # shellcheck disable=SC2086  # TORCHRUN and rdzv are word lists
  timeout 120 $TORCHRUN $rdzv --no-python --nproc-per-node "$nproc" "$train" --data "$data" --device "$device" --distributed \
    --model mlp --epochs 1 --limit-train 512 --limit-test 128 --batch-size 32 --dist-timeout 60 \
    >"$log/$name.$mode" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  status=ok
  if [ $rc -ne 0 ]; then
    status="FAILED (exit $rc)"
    failed=1
    echo "---- $name under torchrun $rdzv: exit $rc; ember's lines, then torchrun's last ones:"
    grep -v "^\s*File \|^\s*\^\|^\s*raise \|^\s*return \|site-packages" "$log/$name.$mode" | grep -iE "ember|error|rank" | head -20
    tail -8 "$log/$name.$mode"
  elif ! grep -q "test accuracy: " "$log/$name.$mode"; then
    status="FAILED (no test accuracy printed)"
    failed=1
    tail -25 "$log/$name.$mode"
  fi
  results="$results$(printf '%-22s %-11s %4ss  %s' "$name" "$mode" "$took" "$status")
"
}

for mode in standalone c10d; do
  run_case "cpu-gloo-2-ranks" 2 cpu "$mode"
  run_case "cpu-gloo-3-ranks" 3 cpu "$mode"
  if [ "$gpu" = 1 ]; then run_case "cuda-nccl-1-rank" 1 cuda "$mode"; fi
done
echo
echo "ember-train under $TORCHRUN"
printf '%-22s %-11s %5s  %s\n' case rendezvous time status
printf '%s' "$results"
[ "$gpu" = 1 ] || echo "(nccl cases skipped: GPU=0 or no nvidia-smi)"
exit $failed
