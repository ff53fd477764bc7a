# ncu_step_kernels.py TRAIN_STEP MODEL BATCH [--layout nchw|channels-last] PRECISION...:
# the kernels of one eager step of build/benchmarks/train_step, listed by
# name with their durations. Runs it under ncu (one metric, clocks not
# locked) with --steps 1 and with --steps 3 and prints the last
# (N3 - N1) / 2 kernels of the second run, for each precision given, and
# their total GPU time. Needs ncu (Nsight Compute) and a GPU. Under ncu a
# launch takes far longer than its kernel, so ember's timed convolution
# plans (conv_autotune) come out as those with the fewest kernels, not those
# a run without ncu picks; EMBER_CONV_AUTOTUNE=0 lists the heuristics' plans.
import csv, io, subprocess, sys
exe, model, batch, rest = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
layout = "nchw"
if rest[:1] == ["--layout"]:
    layout, rest = rest[1], rest[2:]
def kernels(precision, steps):
    out = subprocess.run(["ncu", "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
                          "--print-units", "base",
                          exe, "--model", model, "--batch", batch, "--mode", "eager", "--precision", precision,
                          "--layout", layout, "--steps", str(steps)], capture_output=True, text=True).stdout
    rows = [r for r in csv.reader(io.StringIO(out[out.find('"ID"'):]))]
    head, rows = rows[0], rows[1:]
    k, v, unit = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    return [(r[k], float(r[v].replace(",", "")) * scale[r[unit]]) for r in rows]
for precision in rest:
    a, b = kernels(precision, 1), kernels(precision, 3)
    per = (len(b) - len(a)) // 2
    step = b[len(b) - per:]
    total = sum(us for _, us in step)
    print(f"## {model} b{batch} {layout} {precision}: {per} kernels per step ({len(a)} with --steps 1, "
          f"{len(b)} with 3), {total:.1f} us of GPU time")
    for name, us in step:
        print(f"  {us:8.2f} us  {name[:140]}")
