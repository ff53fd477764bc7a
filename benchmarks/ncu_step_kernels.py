# ncu_step_kernels.py TRAIN_STEP MODEL BATCH PRECISION...: the kernels of one
# eager step of build/benchmarks/train_step, listed by name. Runs it under
# ncu (one metric, clocks not locked) with --steps 1 and with --steps 3 and
# prints the last (N3 - N1) / 2 kernel names of the second run, for each
# precision given. Needs ncu (Nsight Compute) and a GPU.
import csv, io, subprocess, sys
exe, model, batch = sys.argv[1], sys.argv[2], sys.argv[3]
def names(precision, steps):
    out = subprocess.run(["ncu", "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
                          exe, "--model", model, "--batch", batch, "--mode", "eager", "--precision", precision,
                          "--steps", str(steps)], capture_output=True, text=True).stdout
    rows = [r for r in csv.reader(io.StringIO(out[out.find('"ID"'):]))]
    head, rows = rows[0], rows[1:]
    k = head.index("Kernel Name")
    return [r[k] for r in rows]
for precision in sys.argv[4:]:
    a, b = names(precision, 1), names(precision, 3)
    per = (len(b) - len(a)) // 2
    print(f"## {model} b{batch} {precision}: {per} kernels per step ({len(a)} with --steps 1, {len(b)} with 3)")
    for n in b[len(b) - per:]:
        print("  ", n[:150])
