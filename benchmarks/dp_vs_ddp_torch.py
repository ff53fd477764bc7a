"""PyTorch's figures for benchmarks/dp_vs_ddp, on the same machine.

The same models (benchmarks/dp_vs_ddp/workload.h and examples/gpt/model.h,
whose twin is torch_models.Gpt: the widened MLP, the CNN with bias-free
convolutions and dropout 0.25, the GPT with an untied bias-free head), optimizers (SGD lr 0.01 momentum 0.9;
AdamW lr 3e-4 for gpt), random batches, the same flags and the same figures
in the same CSV columns (framework "torch"); benchmarks/dp_vs_ddp.cpp's
comment defines them. The modes:

  single       the module on device 0
  dp-classic   torch.nn.DataParallel over devices 0..N-1 (CUDA only: without
               GPUs torch's DataParallel runs the module as it is, so there
               is nothing to measure; ember's fast mode has no PyTorch twin)
  ddp          DistributedDataParallel, one process per device under torchrun
               (python3 -m torch.distributed.run --standalone
               --nproc_per_node N dp_vs_ddp_torch.py --modes ddp ...):
               nccl with cuda:LOCAL_RANK, gloo on the CPU

Precision "amp": float16 autocast with a GradScaler on CUDA, bfloat16
autocast on the CPU, as ember. The attention is torch_models.causal_attention
(F.scaled_dot_product_attention(is_causal=True), its math on torch 1.13), as
ember's. On the CPU each process uses --threads intra-op threads (default 1,
as ember's single-threaded CPU kernels). The hidden all-reduce fraction uses buckets
made by DDP's rule (parameters in reverse order, 1 MiB first, then 25 MiB)
and a sum all_reduce (gloo has no average). Each framework's DDP runs with its
defaults (ember's gradient_as_bucket_view is on, PyTorch's off).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from torch_bench import make_train_step, median, p95, time_steps
from torch_models import Gpt, make_cnn, make_mlp

CSV_HEADER = ("framework,model,model_shape,parameters,mode,precision,devices,hardware,batch_per_device,unit,"
              "throughput,efficiency,step_ms_median,step_ms_p95,peak_mib_dev0,peak_mib_other_max,peak_mib_all,"
              "ddp_sync_ms,ddp_no_sync_ms,allreduce_ms,hidden_fraction")


class Workload:
    def __init__(self, a):
        self.model, self.batch = a.model, a.batch
        self.gpt = (a.gpt_layers, a.gpt_width, a.gpt_heads, a.gpt_context, a.gpt_vocab)

    @property
    def is_gpt(self):
        return self.model == "gpt"

    @property
    def unit(self):
        return "tokens" if self.is_gpt else "samples"

    @property
    def units_per_sample(self):
        return self.gpt[3] if self.is_gpt else 1

    def shape(self):
        if self.model == "mlp":
            return "784-1024-1024-10"
        if self.model == "cnn":
            return "conv32-conv64-fc128-10 dropout 0.25"
        return "L%d W%d H%d T%d V%d" % self.gpt

    def make_model(self):
        torch.manual_seed(0)
        if self.model == "mlp":
            return make_mlp()
        if self.model == "cnn":
            return make_cnn()
        return Gpt(*self.gpt)

    def make_optimizer(self, params):
        if self.is_gpt:
            return torch.optim.AdamW(params, lr=3e-4, weight_decay=0.01)
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)

    def make_batch(self, samples, device, seed):
        torch.manual_seed(seed)
        if self.is_gpt:
            vocab, context = self.gpt[4], self.gpt[3]
            return (torch.randint(0, vocab, (samples, context), device=device),
                    torch.randint(0, vocab, (samples, context), device=device))
        return torch.randn(samples, 1, 28, 28, device=device), torch.randint(0, 10, (samples,), device=device)

    def loss(self, output, target):
        if self.is_gpt:
            return F.cross_entropy(output.reshape(-1, output.size(-1)), target.reshape(-1))
        return F.cross_entropy(output, target)


class Precision:
    def __init__(self, choice, device_type):
        self.device_type = device_type
        if choice == "fp32":
            self.name, self.dtype = "fp32", None
        elif device_type == "cuda":
            self.name, self.dtype = "amp-fp16", torch.float16
        else:
            self.name, self.dtype = "amp-bf16", torch.bfloat16


def measure(devices, a, step):
    time_steps(devices[0], a.warmup, 0, step)
    cuda = [d for d in devices if d.type == "cuda"]
    for d in cuda:
        torch.cuda.reset_peak_memory_stats(d)
    ms = time_steps(devices[0], 0, a.steps, step)
    return ms, [torch.cuda.max_memory_allocated(d) / 2**20 for d in cuda]


def make_row(mode, precision, devices, w, ms, peaks, baseline):
    med = median(ms)
    throughput = devices * w.batch * w.units_per_sample / (med * 1e-3)
    return {"mode": mode, "precision": precision.name, "devices": devices, "throughput": throughput,
            "efficiency": throughput / (devices * (baseline or throughput)), "median": med, "p95": p95(ms),
            "peaks": peaks, "ddp": None}


def run_single(a, w, precision, device):
    model = w.make_model()
    parameters = sum(p.numel() for p in model.parameters())
    model.to(device)
    x, y = w.make_batch(w.batch, device, 1)
    step = make_train_step(model, w.make_optimizer(model.parameters()),
                           w.loss, x, y, precision.device_type, precision.dtype)
    ms, peaks = measure([device], a, step)
    return make_row("single", precision, 1, w, ms, peaks, 0), parameters


def run_data_parallel(a, w, precision, devices, baseline):
    net = w.make_model().to(devices[0])
    dp = nn.DataParallel(net, device_ids=[d.index for d in devices])
    x, y = w.make_batch(len(devices) * w.batch, devices[0], 1)
    step = make_train_step(dp, w.make_optimizer(net.parameters()),
                           w.loss, x, y, precision.device_type, precision.dtype)

    def synchronized():
        step()
        for d in devices:
            torch.cuda.synchronize(d)
    ms, peaks = measure(devices, a, synchronized)
    return make_row("dp-classic", precision, len(devices), w, ms, peaks, baseline)


def ddp_buckets(params, first_cap=1 << 20, cap=25 << 20):
    """Numel and dtype of each bucket by DDP's rule: reverse order, per dtype, closed at the cap."""
    buckets, open_ = [], {}
    for p in reversed([p for p in params if p.requires_grad]):
        b = open_.setdefault(p.dtype, {"numel": 0, "bytes": 0, "dtype": p.dtype, "first": True})
        b["numel"] += p.numel()
        b["bytes"] += p.numel() * p.element_size()
        if b["bytes"] >= (first_cap if b["first"] else cap):
            buckets.append(b)
            open_[p.dtype] = {"numel": 0, "bytes": 0, "dtype": p.dtype, "first": False}
    buckets += [b for b in open_.values() if b["numel"] > 0]
    return buckets


def run_ddp(a, w, precision, device, baseline):
    from torch.nn.parallel import DistributedDataParallel as DDP
    net = w.make_model().to(device)
    ddp = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
    x, y = w.make_batch(w.batch, device, 1 + dist.get_rank())
    step = make_train_step(ddp, w.make_optimizer(ddp.parameters()),
                           w.loss, x, y, precision.device_type, precision.dtype)
    ms, peaks = measure([device], a, step)
    row = make_row("ddp", precision, dist.get_world_size(), w, ms, peaks, baseline)
    with ddp.no_sync():
        no_sync = median(time_steps(device, 1, a.steps, step))
    tensors = [torch.zeros(b["numel"], dtype=b["dtype"], device=device) for b in ddp_buckets(net.parameters())]

    def all_reduce():
        for work in [dist.all_reduce(t, async_op=True) for t in tensors]:
            work.wait()
    allreduce = median(time_steps(device, 1, a.steps, all_reduce))
    row["ddp"] = (row["median"], no_sync, allreduce)
    if peaks:
        slots = torch.zeros(dist.get_world_size(), dtype=torch.float64, device=device)
        slots[dist.get_rank()] = peaks[0]
        dist.all_reduce(slots)
        row["peaks"] = slots.cpu().tolist()
    return row


def hidden_fraction(ddp):
    sync, no_sync, allreduce = ddp
    if allreduce <= 0:
        return None
    return 1.0 - min(max((sync - no_sync) / allreduce, 0.0), 1.0)


def print_header(unit):
    print(f"| model | mode | precision | devices | {unit}/s | efficiency | step ms median | step ms p95 | "
          "peak MiB per device | DDP ms: sync / no_sync / all-reduce | all-reduce hidden |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|---|---:|")


def print_row(model, r):
    memory = " / ".join(f"{m:.0f}" for m in r["peaks"]) if r["peaks"] else "-"
    overlap, hidden = "-", "-"
    if r["ddp"]:
        overlap = " / ".join(f"{v:.2f}" for v in r["ddp"])
        h = hidden_fraction(r["ddp"])
        if h is not None:
            hidden = f"{100 * h:.0f}%"
    print(f"| {model} | {r['mode']} | {r['precision']} | {r['devices']} | {r['throughput']:.0f} | "
          f"{r['efficiency']:.2f} | {r['median']:.2f} | {r['p95']:.2f} | {memory} | {overlap} | {hidden} |",
          flush=True)


def append_csv(path, w, hardware, parameters, r):
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    peaks = r["peaks"]
    mem0 = f"{peaks[0]:.1f}" if peaks else ""
    mem_other = f"{max(peaks[1:]):.1f}" if len(peaks) > 1 else ""
    mem_all = ";".join(f"{m:.0f}" for m in peaks)
    ddp = ["", "", "", ""]
    if r["ddp"]:
        h = hidden_fraction(r["ddp"])
        ddp = [f"{v:.3f}" for v in r["ddp"]] + ["" if h is None else f"{h:.3f}"]
    fields = ["torch", w.model, w.shape(), str(parameters), r["mode"], r["precision"], str(r["devices"]), hardware,
              str(w.batch), w.unit, f"{r['throughput']:.1f}", f"{r['efficiency']:.3f}", f"{r['median']:.3f}",
              f"{r['p95']:.3f}", mem0, mem_other, mem_all] + ddp
    with open(path, "a") as f:
        if new:
            f.write(CSV_HEADER + "\n")
        f.write(",".join(fields) + "\n")


def parse(argv, launched):
    p = argparse.ArgumentParser(prog="dp_vs_ddp_torch.py", description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["mlp", "cnn", "gpt"], default="mlp")
    p.add_argument("--modes", default="ddp" if launched else "single,dp-classic",
                   help="single,dp-classic (one process) or ddp (under torchrun)")
    p.add_argument("--precision", default="fp32,amp")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--devices", type=int, default=0, help="devices for single-process modes (default: all GPUs)")
    p.add_argument("--batch", type=int, default=0, help="samples per device (default 256 mlp, 64 cnn, 8 gpt)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--csv", default="")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process on the CPU")
    for flag, default in (("layers", 12), ("width", 768), ("heads", 12), ("context", 256), ("vocab", 50257)):
        p.add_argument(f"--gpt-{flag}", type=int, default=default)
    a = p.parse_args(argv)
    a.modes = a.modes.split(",")
    a.precision = a.precision.split(",")
    for m in a.modes:
        if m not in ("single", "dp-classic", "ddp"):
            p.error(f"--modes: expected single, dp-classic or ddp, got '{m}'")
    if "ddp" in a.modes and (len(a.modes) > 1 or not launched):
        p.error("--modes ddp runs alone, under torchrun: python3 -m torch.distributed.run --standalone "
                "--nproc_per_node N dp_vs_ddp_torch.py --modes ddp ...")
    if "ddp" not in a.modes and launched:
        p.error("the single-process modes run without a launcher; under torchrun use --modes ddp")
    if any(x not in ("fp32", "amp") for x in a.precision):
        p.error(f"--precision: expected a comma-separated list of fp32,amp, got '{','.join(a.precision)}'")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is visible")
    if "dp-classic" in a.modes and a.device == "cpu":
        p.error("--modes dp-classic needs GPUs: torch.nn.DataParallel without GPUs runs the module as it is")
    gpus = torch.cuda.device_count() if a.device == "cuda" else 0
    a.devices = a.devices or max(gpus, 1)
    if a.device == "cuda" and a.devices > gpus:
        p.error(f"--devices {a.devices}: only {gpus} GPUs are visible")
    a.batch = a.batch or {"mlp": 256, "cnn": 64, "gpt": 8}[a.model]
    if min(a.steps, a.warmup, a.batch, a.devices, a.threads) < 1:
        p.error("--steps, --warmup, --batch, --devices and --threads are counts from 1")
    if a.gpt_width % a.gpt_heads:
        p.error(f"--gpt-width {a.gpt_width} must be a multiple of --gpt-heads {a.gpt_heads}")
    return a


def preamble(a, w, where):
    shape = (" (%d layers, width %d, %d heads, context %d, vocab %d)" % w.gpt) if w.is_gpt else ""
    print(f"torch dp_vs_ddp: {w.model}{shape}, batch {w.batch} per device, median and p95 of {a.steps} steps "
          f"after {a.warmup} warm-up steps, on {where}, torch {torch.__version__}\n")
    print_header(w.unit)


def main():
    launched = bool(os.environ.get("RANK") or os.environ.get("WORLD_SIZE"))
    a = parse(sys.argv[1:], launched)
    w = Workload(a)
    if a.device == "cpu":
        torch.set_num_threads(a.threads)
    hardware = torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu"
    if launched:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local) if a.device == "cuda" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        leader = dist.get_rank() == 0
        if leader:
            preamble(a, w, f"{dist.get_world_size()} ranks over {dist.get_backend()}, "
                     + (f"{hardware} each (CUDA events)" if device.type == "cuda" else "CPU (wall time)"))
        for choice in a.precision:
            precision = Precision(choice, device.type)
            baseline, parameters = 0, 0
            if leader:
                single, parameters = run_single(a, w, precision, device)
                baseline = single["throughput"]
            dist.barrier()
            r = run_ddp(a, w, precision, device, baseline)
            if leader:
                print_row(w.model, r)
                if a.csv:
                    append_csv(a.csv, w, hardware, parameters, r)
        dist.barrier()
        dist.destroy_process_group()
        return
    devices = [torch.device("cuda", i) if a.device == "cuda" else torch.device("cpu") for i in range(a.devices)]
    preamble(a, w, f"{a.devices} x {hardware} (CUDA events)" if a.device == "cuda" else "CPU (wall time)")
    for choice in a.precision:
        precision = Precision(choice, a.device)
        single, parameters = run_single(a, w, precision, devices[0])
        rows = [single] if "single" in a.modes else []
        if "dp-classic" in a.modes:
            rows.append(run_data_parallel(a, w, precision, devices, single["throughput"]))
        for r in rows:
            print_row(w.model, r)
            if a.csv:
                append_csv(a.csv, w, hardware, parameters, r)


if __name__ == "__main__":
    main()
