"""Writes the report of benchmarks/dp_vs_ddp from its CSV (ember's and torch's rows).

  python3 benchmarks/dp_vs_ddp_report.py CSV OUTDIR [--note LINE]...

OUTDIR/report.md: the notes (what ran, where, with which command), then per
model a markdown table of every row (sorted by precision, mode, devices,
framework) and its plots; OUTDIR/<model>_throughput.png: throughput against
devices, one panel per precision, one line per framework and mode (a mode
keeps its colour; ember solid, torch dashed); OUTDIR/<model>_memory.png: the peak memory of device 0 beside the
largest peak of the other devices, for each framework, mode and precision
at the largest device count (only when the CSV has memory figures: GPU
runs). The plots are drawn by gnuplot (scripts/install_bench_deps.sh
installs it). Without gnuplot (a GPU machine with no package registry) the
report still gets its tables, with a line saying the plots are missing, and
the script exits 1 naming gnuplot: run it again on the CSV where gnuplot is.
Python's standard library only.
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys

MODES = ["single", "dp-classic", "dp-fast", "ddp"]


def sort_key(r):
    return (r["precision"] != "fp32", r["precision"], MODES.index(r["mode"]) if r["mode"] in MODES else 99, int(r["devices"]), r["framework"])


def cell(v, digits):
    return "-" if v == "" else f"{float(v):.{digits}f}"


def table(rows):
    unit = rows[0]["unit"]
    lines = [f"| framework | mode | precision | devices | {unit}/s | efficiency | step ms median | step ms p95 | "
             "peak MiB device 0 | peak MiB other devices (max) | DDP ms: sync / no_sync / all-reduce | "
             "all-reduce hidden |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in sorted(rows, key=sort_key):
        ddp = "-"
        if r["ddp_sync_ms"]:
            ddp = " / ".join(cell(r[k], 2) for k in ("ddp_sync_ms", "ddp_no_sync_ms", "allreduce_ms"))
        hidden = "-" if r["hidden_fraction"] == "" else f"{100 * float(r['hidden_fraction']):.0f}%"
        lines.append(f"| {r['framework']} | {r['mode']} | {r['precision']} | {r['devices']} | "
                     f"{cell(r['throughput'], 0)} | {cell(r['efficiency'], 2)} | {cell(r['step_ms_median'], 2)} | "
                     f"{cell(r['step_ms_p95'], 2)} | {cell(r['peak_mib_dev0'], 0)} | "
                     f"{cell(r['peak_mib_other_max'], 0)} | {ddp} | {hidden} |")
    return "\n".join(lines)


def series(rows):
    """(framework, mode, precision) -> rows sorted by devices."""
    out = {}
    for r in sorted(rows, key=sort_key):
        out.setdefault((r["framework"], r["mode"], r["precision"]), []).append(r)
    return out


COLORS = {"single": "black", "dp-classic": "#1f77b4", "dp-fast": "#2ca02c", "ddp": "#d62728"}


def throughput_plot(model, rows, png):
    """One panel per precision; a mode keeps its colour, ember is solid and torch dashed."""
    precisions = list(dict.fromkeys(r["precision"] for r in sorted(rows, key=sort_key)))
    devices = sorted({int(r["devices"]) for r in rows})
    blocks, panels = [], []
    for precision in precisions:
        plots = []
        for (framework, mode, p), rs in series(rows).items():
            if p != precision:
                continue
            name = f"$s{len(blocks)}"
            blocks.append(f"{name} << EOD\n" + "\n".join(f"{r['devices']} {r['throughput']}" for r in rs) + "\nEOD")
            dash = 1 if framework == "ember" else 2
            plots.append(f"{name} using 1:2 with linespoints dashtype {dash} linewidth 2 pointsize 1.3 "
                         f"linecolor rgb '{COLORS.get(mode, 'gray')}' title '{framework} {mode}'")
        panels.append(f"set title '{precision}'\nplot {', '.join(plots)}")
    return "\n".join(blocks) + f"""
set terminal pngcairo size {560 * len(precisions) + 80},600 noenhanced
set output '{png}'
set multiplot layout 1,{len(precisions)} title '{model}: {rows[0]['unit']} per second against devices ({rows[0]['hardware']})'
set xlabel 'devices'
set ylabel '{rows[0]['unit']} per second'
set xtics ({', '.join(str(d) for d in devices)})
set xrange [{devices[0] - 0.5}:{devices[-1] + 0.5}]
set yrange [0:*]
set key below
set grid
""" + "\n".join(panels) + "\nunset multiplot\n"


def memory_plot(model, rows, png):
    with_memory = [r for r in rows if r["peak_mib_dev0"] != ""]
    most = max(int(r["devices"]) for r in with_memory)
    picked = sorted([r for r in with_memory if int(r["devices"]) == most or r["mode"] == "single"], key=sort_key)
    data = "\n".join(f"\"{r['framework']} {r['mode']} {r['precision']} x{r['devices']}\" {r['peak_mib_dev0']} "
                     f"{r['peak_mib_other_max'] or 0}" for r in picked)
    top = 1.15 * max(max(float(r["peak_mib_dev0"]), float(r["peak_mib_other_max"] or 0)) for r in picked)
    return f"""$mem << EOD
{data}
EOD
set terminal pngcairo size 1000,650 noenhanced
set output '{png}'
set title '{model}: peak memory per device ({rows[0]['hardware']}; single: one device)'
set ylabel 'peak allocated MiB'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set xtics rotate by 30 right
set bmargin 9
set yrange [0:{top:.0f}]
set key top right
set grid ytics
plot $mem using 2:xtic(1) title 'device 0', '' using 3 title 'other devices (largest)'
"""


def gnuplot(script):
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("outdir")
    p.add_argument("--note", action="append", default=[], help="a line for the top of the report")
    a = p.parse_args()
    with open(a.csv) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"dp_vs_ddp_report.py: {a.csv} has no rows")
    os.makedirs(a.outdir, exist_ok=True)
    plots = shutil.which("gnuplot") is not None
    out = ["# dp_vs_ddp report", ""] + [f"{n}  " for n in a.note] + [""]
    if not plots:
        out += ["(No plots: gnuplot is not installed where this report was written; run "
                "`benchmarks/dp_vs_ddp_report.py` on the CSV where it is.)", ""]
    for model in dict.fromkeys(r["model"] for r in rows):
        rs = [r for r in rows if r["model"] == model]
        shapes = ", ".join(sorted({f"{r['framework']} {int(r['parameters']):,} parameters" for r in rs}))
        out += [f"## {model} ({rs[0]['model_shape']}; batch {rs[0]['batch_per_device']} per device; {shapes})", "",
                table(rs), ""]
        memory = any(r["peak_mib_dev0"] != "" for r in rs)
        if plots:
            gnuplot(throughput_plot(model, rs, os.path.join(a.outdir, f"{model}_throughput.png")))
            out.append(f"![{model} throughput]({model}_throughput.png)")
            if memory:
                gnuplot(memory_plot(model, rs, os.path.join(a.outdir, f"{model}_memory.png")))
                out.append(f"![{model} memory per device]({model}_memory.png)")
        if not memory:
            out.append("(No memory figures: CPU run.)")
        out.append("")
    with open(os.path.join(a.outdir, "report.md"), "w") as f:
        f.write("\n".join(out))
    print(f"dp_vs_ddp_report.py: wrote {os.path.join(a.outdir, 'report.md')}")
    if not plots:
        sys.exit("dp_vs_ddp_report.py: gnuplot is not installed, so the report has no plots; run "
                 "scripts/install_bench_deps.sh, or this script on the CSV on a machine with gnuplot")


if __name__ == "__main__":
    main()
