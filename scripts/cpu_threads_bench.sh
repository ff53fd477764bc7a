#!/usr/bin/env bash
# ember's CPU kernels across thread counts: ember-train's MLP and CNN on the
# CPU (fixed steps of batch 64, Adam, no augmentation, one loader thread) at
# each count given, and the same CNN in PyTorch at the same count
# (benchmarks/cpu_threads_torch.py; skipped when python3 lacks torch).
# Prints a markdown table of training throughput and the CNN epoch time it
# implies (60000 images); the CNN's speedup is against the first count given.
#
#   bash scripts/cpu_threads_bench.sh BUILD_DIR THREADS...    e.g. build 1 2 4 8 16
#
# CPU_BENCH_STEPS (default 100) sets the steps per run: a short run's rate
# includes its first step, which costs several steady steps (fresh memory
# faulted in, caches filled) and weighs differently at each thread count,
# so its speedups are not a whole epoch's. CPU_BENCH_EPOCH=1 adds a second
# table: ember's CNN over one whole epoch (60000 images, 938 steps) at the
# first and the last count given. Needs Fashion-MNIST
# (scripts/install_deps.sh puts it in /usr/share/datasets/fashion-mnist;
# FASHION_MNIST=DIR points elsewhere).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ $# -lt 2 ]]; then
  echo "usage: bash scripts/cpu_threads_bench.sh BUILD_DIR THREADS... (e.g. build 1 2 4 8 16)" >&2
  exit 2
fi
build=$1
shift
train=$build/examples/ember-train
[[ -x $train ]] || { echo "no $train: build it with ninja -C $build ember-train" >&2; exit 2; }
steps=${CPU_BENCH_STEPS:-100}
data=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}

# Training samples/s of one ember-train run (its epoch line's "(N samples/s)").
# A third argument "epoch" trains on the whole training set.
ember_rate() {
  local threads=$1 model=$2 limit=(--limit-train $((steps * 64)))
  [[ ${3:-} == epoch ]] && limit=()
  EMBER_NUM_THREADS=$threads "$train" --model "$model" --device cpu --epochs 1 --augment none --workers 1 \
    ${limit[@]+"${limit[@]}"} --limit-test 64 --data "$data" 2>/dev/null |
    grep -o '([0-9.]* samples/s)' | tail -1 | tr -d '(' | cut -d' ' -f1
}

# The first of $PYTHON, python3 and Debian's /usr/bin/python3 that has torch.
py=""
for candidate in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$candidate" -c "import torch" 2>/dev/null; then
    py=$candidate
    break
  fi
done
declare -A torch_rate=()
if [[ -n $py ]]; then
  while read -r threads rate; do torch_rate[$threads]=$rate; done < <("$py" benchmarks/cpu_threads_torch.py "$steps" "$@")
  torch_version=$("$py" -c "import torch; print(torch.__version__)")
else
  echo "(no python3 with torch: ember's columns only)" >&2
  torch_version=none
fi

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs; $steps steps of batch 64;" \
  "torch $torch_version; commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo "| threads | ember MLP samples/s | ember CNN samples/s | ember CNN epoch (s) | CNN speedup | PyTorch CNN samples/s | ember / PyTorch |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
base=""
for threads in "$@"; do
  mlp=$(ember_rate "$threads" mlp)
  cnn=$(ember_rate "$threads" cnn)
  base=${base:-$cnn}
  torch=${torch_rate[$threads]:-}
  ratio=-
  [[ -n $torch ]] && ratio=$(awk -v e="$cnn" -v t="$torch" 'BEGIN { printf "%.2f", e / t }')
  awk -v t="$threads" -v m="$mlp" -v c="$cnn" -v b="$base" -v p="${torch:--}" -v r="$ratio" \
    'BEGIN { printf "| %d | %.0f | %.0f | %.1f | %.2fx | %s | %s |\n", t, m, c, 60000 / c, c / b, p, r }'
done

if [[ ${CPU_BENCH_EPOCH:-0} == 1 ]]; then
  counts=("$1")
  [[ $# -gt 1 ]] && counts+=("${@: -1}")
  echo
  echo "Whole epochs (60000 images) of ember's CNN:"
  echo
  echo "| threads | ember CNN samples/s | ember CNN epoch (s) | CNN speedup |"
  echo "| ---: | ---: | ---: | ---: |"
  base=""
  for threads in "${counts[@]}"; do
    cnn=$(ember_rate "$threads" cnn epoch)
    base=${base:-$cnn}
    awk -v t="$threads" -v c="$cnn" -v b="$base" \
      'BEGIN { printf "| %d | %.0f | %.1f | %.2fx |\n", t, c, 60000 / c, c / b }'
  done
fi
