#!/usr/bin/env bash
# Runs benchmarks/dp_vs_ddp and benchmarks/dp_vs_ddp_torch.py over 1..N
# devices for every model, in fp32 and amp, into one CSV, and writes the
# report from it (benchmarks/dp_vs_ddp_report.py: markdown tables and
# gnuplot PNGs). benchmarks/run_gpu.sh dp_vs_ddp builds ember and calls it
# on a GPU machine; on the CPU call it directly:
#
#   benchmarks/dp_vs_ddp.sh BUILD_DIR OUT_DIR gpu|cpu
#
# BUILD_DIR holds ember-run and benchmarks/dp_vs_ddp (targets ember_run and
# bench_dp_vs_ddp). Device counts: 1, 2, 4, ... up to N, and N itself.
#   gpu  N = the visible GPUs; the models at full size (GPT-2 small's shape),
#        20 steps after 3 warm-up steps
#   cpu  N = 2 (CPU replicas on threads for DataParallel, gloo ranks for
#        DDP), small sizes and 10 steps after 2 warm-up steps, so that the
#        whole set takes minutes on two cores: mlp batch 64, cnn batch 16,
#        gpt 2 layers, width 128, 4 heads, context 64, vocab 1024, batch 4;
#        PyTorch gets one thread per process, as ember's kernels use
# Per device count: ember's single (1 device only), dp-classic and dp-fast
# in one process and ddp under ember-run; torch's single, dp-classic (GPU
# only: torch's DataParallel needs GPUs) and ddp under torchrun. Debian's
# torch 1.13 on Python 3.11 cannot start torchrun's workers with its default
# --redirects 0 (Std.from_str("0") is None), so there it runs with
# --redirects 1 --tee 1 (each rank's stdout also to a log), which works.
# Environment: N (the device count to go up to), MODELS ("mlp cnn gpt"),
# STEPS, WARMUP, PYTHON (python3; must import torch), GPT_CONTEXT (gpu: the
# gpt model's context instead of the workload's). A run that fails is
# logged under OUT_DIR/logs and the script goes on; it exits 1 at the end
# if any run failed (or torch is missing), after writing the report of what
# did run.
set -uo pipefail
if [ $# -ne 3 ] || { [ "$3" != gpu ] && [ "$3" != cpu ]; }; then
  echo "usage: benchmarks/dp_vs_ddp.sh BUILD_DIR OUT_DIR gpu|cpu" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd) || exit 2
out=$2
kind=$3
bench=$build/benchmarks/dp_vs_ddp
launcher=$build/ember-run
python=${PYTHON:-python3}
for exe in "$bench" "$launcher"; do
  [ -x "$exe" ] || { echo "dp_vs_ddp.sh: $exe is missing (build ember_run and bench_dp_vs_ddp)" >&2; exit 2; }
done
mkdir -p "$out/logs"
csv=$out/dp_vs_ddp.csv
rm -f "$csv"
status=0

if [ "$kind" = gpu ]; then
  max=${N:-$(nvidia-smi -L 2>/dev/null | wc -l)}
  [ "$max" -ge 1 ] || { echo "dp_vs_ddp.sh: no GPU visible (nvidia-smi -L)" >&2; exit 2; }
  common=(--device cuda --steps "${STEPS:-20}" --warmup "${WARMUP:-3}")
  torch_common=("${common[@]}")
  declare -A sizes=([mlp]="" [cnn]="" [gpt]="${GPT_CONTEXT:+--gpt-context $GPT_CONTEXT}")
  hardware="$max x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
else
  max=${N:-2}
  common=(--device cpu --steps "${STEPS:-10}" --warmup "${WARMUP:-2}")
  torch_common=("${common[@]}" --threads 1)
  declare -A sizes=([mlp]="--batch 64" [cnn]="--batch 16"
    [gpt]="--batch 4 --gpt-layers 2 --gpt-width 128 --gpt-heads 4 --gpt-context 64 --gpt-vocab 1024")
  hardware="CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
fi
counts=()
for ((n = 1; n <= max; n *= 2)); do counts+=("$n"); done
[ "${counts[-1]}" -eq "$max" ] || counts+=("$max")

have_torch=1
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) || {
  echo "dp_vs_ddp.sh: $python cannot import torch: no PyTorch figures (set PYTHON)" >&2
  have_torch=0
  status=1
}
torchrun=("$python" -m torch.distributed.run --standalone)
if [ $have_torch = 1 ] && ! "$python" -c \
  'from torch.distributed.elastic.multiprocessing.api import Std; assert Std.from_str("0") is not None' 2>/dev/null; then
  torchrun+=(--redirects 1 --tee 1)
fi

# run NAME COMMAND...: the command's output into logs/NAME.log, its tables on the terminal.
run() {
  local name=$1
  shift
  echo "== $name"
  if "$@" >"$out/logs/$name.log" 2>&1; then
    grep -E '^(\[(rank |default)0\]:?\s*)?\|' "$out/logs/$name.log" | grep -v -- '---' | tail -n +2
  else
    echo "FAILED ($name, exit $?): see $out/logs/$name.log"
    tail -5 "$out/logs/$name.log"
    status=1
  fi
}

load=$(cut -d" " -f1-3 /proc/loadavg)
start=$(date +%s)
for model in ${MODELS:-mlp cnn gpt}; do
  read -r -a size <<<"${sizes[$model]}"
  args=(--model "$model" "${size[@]}" --csv "$csv")
  for n in "${counts[@]}"; do
    if [ "$n" -eq 1 ]; then modes=single,dp-classic,dp-fast; else modes=dp-classic,dp-fast; fi
    run "ember-$model-dp-$n" "$bench" "${args[@]}" "${common[@]}" --modes "$modes" --devices "$n"
    run "ember-$model-ddp-$n" "$launcher" --standalone --nproc-per-node "$n" "$bench" "${args[@]}" "${common[@]}" \
      --modes ddp
    [ $have_torch = 1 ] || continue
    torch_script=$root/benchmarks/dp_vs_ddp_torch.py
    if [ "$kind" = gpu ]; then
      if [ "$n" -eq 1 ]; then modes=single,dp-classic; else modes=dp-classic; fi
      run "torch-$model-dp-$n" "$python" "$torch_script" "${args[@]}" "${torch_common[@]}" --modes "$modes" \
        --devices "$n"
    elif [ "$n" -eq 1 ]; then
      run "torch-$model-single" "$python" "$torch_script" "${args[@]}" "${torch_common[@]}" --modes single
    fi
    run "torch-$model-ddp-$n" "${torchrun[@]}" --nproc_per_node "$n" "$torch_script" "${args[@]}" \
      "${torch_common[@]}" --modes ddp
  done
done
elapsed=$(($(date +%s) - start))

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
notes=(
  "Hardware: $hardware."
  "ember $commit, PyTorch ${torch_version:-missing}; $(date -u '+%Y-%m-%d %H:%M UTC'); the runs took ${elapsed} s; load average before them: $load ($(nproc) cores)."
  "Command: benchmarks/dp_vs_ddp.sh $1 $out $kind (N=$max, device counts ${counts[*]}, common flags: ${common[*]})."
)
[ "$kind" = cpu ] && notes+=("CPU run: DataParallel's devices are CPU replicas on threads, DDP's ranks are processes over gloo; amp is bfloat16 autocast; no memory figures.")
if [ $have_torch = 1 ] && "$python" -c \
  'import sys, torch; sys.exit("BLAS_INFO=generic" not in torch.__config__.show())' 2>/dev/null; then
  blas=$(readlink -f "$(ldconfig -p | awk '/libblas\.so\.3 /{print $NF; exit}')")
  notes+=("This PyTorch is built with BLAS_INFO=generic: its float32 matmuls call the system's libblas.so.3, here $blas (netlib's reference BLAS when that is the path under blas/; OpenBLAS or BLIS, installed as the libblas.so.3 alternative, would be far faster); its bfloat16 matmuls do not go through it.")
fi
[ ${#torchrun[@]} -gt 4 ] && notes+=("torchrun ran with --redirects 1 --tee 1 (this torch's default --redirects 0 fails on this Python).")
if [ -s "$csv" ]; then
  report_notes=()
  for n in "${notes[@]}"; do report_notes+=(--note "$n"); done
  python3 "$root/benchmarks/dp_vs_ddp_report.py" "$csv" "$out" "${report_notes[@]}" || status=1
else
  echo "dp_vs_ddp.sh: no rows were written" >&2
  status=1
fi
exit $status
