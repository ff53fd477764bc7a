#!/usr/bin/env bash
# Builds ember on a CUDA machine, runs the whole ctest suite, the
# benchmarks beside their PyTorch twins, the DataParallel/DDP benchmark
# beside PyTorch's, and (optionally) compute-sanitizer over the CUDA tests;
# writes every log into $OUT (or ./gpu-report) and, last, $OUT/report.md:
# the ctest summary and every benchmark's tables, ember's beside PyTorch's.
#
#   benchmarks/run_gpu.sh [tests] [bench] [gpt] [dp_vs_ddp] [sanitize]   (default: tests bench)
#
# bench: kernels and torch_reference.py; host_overhead; train_step and
# train_step_torch.py (fp32, amp-fp16, amp-bf16); amp_checkpoint and
# amp_checkpoint_torch.py on the GEMM-heavy MLP (8 x 4096 wide, batch 8192)
# and the checkpointing MLP (32 x 2048 wide, batch 8192); data_parallel.
#
# gpt: gpt_train and gpt_train_torch.py (GPT-2 small at batch 8, 16, 32,
# 64; PyTorch eager and torch.compile), attention and attention_torch.py
# (causal attention, head dims 64 and 128, T 1024 to 4096). Only that,
# built quickly:
#   EMBER_TARGETS="bench_gpt_train bench_attention" benchmarks/run_gpu.sh gpt
#
# dp_vs_ddp installs gnuplot (scripts/install_bench_deps.sh) and runs
# benchmarks/dp_vs_ddp.sh over 1..N GPUs: $OUT/dp_vs_ddp/report.md with its
# plots. Only that, built quickly:
#   EMBER_TARGETS="ember_run bench_dp_vs_ddp" benchmarks/run_gpu.sh dp_vs_ddp
#
# The build is Release for sm_90 (override CMAKE_CUDA_ARCHITECTURES in the
# environment) with all cores, into build-gpu/ (EMBER_BUILD_DIR overrides
# it; EMBER_PREBUILT=1 skips the build and uses that folder as it is, e.g.
# a build made for sm_90 on a machine without a GPU and carried here); a
# step that fails stops nothing after it, and the script exits non-zero if
# any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-report}
mkdir -p "$out"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests bench)
arch=${CMAKE_CUDA_ARCHITECTURES:-90}
jobs=$(nproc)
status=0

build=${EMBER_BUILD_DIR:-build-gpu}

if [ "${EMBER_PREBUILT:-0}" = 1 ]; then
  [ -x "$build/tests/ember_tests" ] || { echo "EMBER_PREBUILT=1 but $build/tests/ember_tests is missing"; exit 1; }
  echo "== prebuilt $build (no build)"
else
  echo "== configure and build (sm_$arch, $jobs jobs)"
  start=$(date +%s)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DEMBER_WITH_CUDA=ON >"$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
  # EMBER_TARGETS limits the build to some targets (e.g. "ember_tests bench_kernels").
  ninja -C "$build" -j"$jobs" ${EMBER_TARGETS:-} >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -40; exit 1; }
  echo "built in $(( $(date +%s) - start )) s"
fi

ran=()  # the benchmarks' outputs, in order, for report.md
# bench NAME COMMAND...: its output on the terminal and in $out/NAME.md.
bench() {
  local name=$1
  shift
  echo "== $name"
  "$@" 2>&1 | tee "$out/$name.md" || status=1
  ran+=("$name")
}

for step in "${steps[@]}"; do
  case "$step" in
    tests)
      echo "== ctest"
      ctest --test-dir "$build" -j"$jobs" --output-on-failure --timeout 120 >"$out/ctest.log" 2>&1 || status=1
      grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest.log" | head -40
      ;;
    bench)
      bench kernels "$build"/benchmarks/kernels
      bench torch_reference python3 benchmarks/torch_reference.py
      bench host_overhead "$build"/benchmarks/host_overhead
      bench train_step "$build"/benchmarks/train_step
      bench train_step_torch python3 benchmarks/train_step_torch.py
      for shape in "4096 8" "2048 32"; do
        read -r width depth <<<"$shape"
        flags=(--width "$width" --depth "$depth" --batch 8192)
        bench "amp_checkpoint_${width}x$depth" "$build"/benchmarks/amp_checkpoint "${flags[@]}"
        bench "amp_checkpoint_torch_${width}x$depth" python3 benchmarks/amp_checkpoint_torch.py "${flags[@]}"
      done
      bench data_parallel "$build"/benchmarks/data_parallel
      ;;
    gpt)
      bench gpt_train "$build"/benchmarks/gpt_train
      bench gpt_train_torch python3 benchmarks/gpt_train_torch.py
      bench attention "$build"/benchmarks/attention
      bench attention_torch python3 benchmarks/attention_torch.py
      ;;
    dp_vs_ddp)
      echo "== benchmarks/dp_vs_ddp.sh (ember and PyTorch over 1..$(nvidia-smi -L | wc -l) GPUs)"
      scripts/install_bench_deps.sh >"$out/install_bench_deps.log" 2>&1 || { tail -5 "$out/install_bench_deps.log"; status=1; }
      benchmarks/dp_vs_ddp.sh "$build" "$out/dp_vs_ddp" gpu 2>&1 | tee "$out/dp_vs_ddp.log" || status=1
      ;;
    sanitize)
      for tool in memcheck racecheck; do
        echo "== compute-sanitizer --tool $tool (CUDA tests)"
        compute-sanitizer --tool "$tool" --error-exitcode 1 --print-limit 20 \
          "$build"/tests/ember_tests --gtest_filter='Cuda*:*Cuda*' >"$out/sanitizer-$tool.log" 2>&1 || status=1
        grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/sanitizer-$tool.log" | tail -5
      done
      ;;
    *) echo "unknown step $step"; status=1 ;;
  esac
done

{
  echo "# ember on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  echo
  echo "ember $(git rev-parse --short HEAD 2>/dev/null), $(date -u '+%Y-%m-%d %H:%M UTC'): benchmarks/run_gpu.sh ${steps[*]}"
  if [ -f "$out/ctest.log" ]; then
    echo
    echo "ctest: $(grep -E '^[0-9]+% tests passed' "$out/ctest.log" | tail -1)"
  fi
  for name in "${ran[@]}"; do
    printf '\n## %s\n\n' "$name"
    cat "$out/$name.md"
  done
  if [ -f "$out/dp_vs_ddp/report.md" ]; then
    printf '\n## dp_vs_ddp\n\nSee dp_vs_ddp/report.md and its plots.\n'
  fi
} >"$out/report.md"
echo "== report: $out/report.md"
exit $status
