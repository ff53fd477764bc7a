#!/usr/bin/env python3
"""Checkpoints that PyTorch opens, and back (nn/serialize.h).

Usage: torch_interop.py [--safetensors-package] HELPER WORKDIR, HELPER being
tests/nn/torch_interop_helper.

(a) ember writes ember-train's MLP and CNN (random weights, float32, bfloat16
    and float16 files) with nn::save; this script loads each into the same
    torch.nn.Sequential with load_state_dict(strict=True), after checking the
    keys, shapes and dtypes against PyTorch's own state_dict and the data
    against ember's CRC-32 checksums, and compares the logits on ember's input.
(b) The reverse: a PyTorch network's state_dict, written by this script with
    float32, bfloat16 and float16 tensors, loads into ember with nn::load and
    gives PyTorch's logits.
(c) Optimizer state (optim/serialize.h), for AdamW with amsgrad and for SGD
    with Nesterov momentum: ember trains the MLP three steps and writes the
    model and optim::save's file; PyTorch loads both into torch.optim, takes
    the fourth step on the same batch and must land on ember's own fourth
    step. Then the reverse: PyTorch's three steps, its optimizer.state_dict()
    written under the same names, one step in ember, compared with PyTorch's
    fourth.
(d) Weight tying: ember's embedding + head sharing one table, saved once by
    nn::save, loads into the same tied torch model (safetensors.torch.
    load_model with the package), and PyTorch's tied model (save_model with
    the package, both names otherwise) loads into ember keeping the tie.
Every file ember writes is checked against its CRC-32 checksums: the data
of each tensor and the header's digest (nn/safetensors.h says what it covers).

The safetensors format is read and written here in a few lines of numpy
(Debian has no safetensors package); with --safetensors-package, PyTorch's
side uses the real one instead (safetensors.torch.load_file and save_file,
safe_open's metadata), and the checksums are still checked on the raw bytes.
Exits 77 (ctest's SKIP_RETURN_CODE) without torch and numpy (or without
torch and safetensors with --safetensors-package).
"""
import json
import os
import struct
import subprocess
import sys
import zlib

USE_PACKAGE = "--safetensors-package" in sys.argv[1:]
try:
    import torch
    if USE_PACKAGE:
        import safetensors
        import safetensors.torch
    else:
        import numpy as np
except ImportError as e:
    print(f"SKIP: torch_interop needs torch and {'safetensors' if USE_PACKAGE else 'numpy'} ({e})")
    sys.exit(77)

# safetensors dtype <-> torch dtype.
DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
          "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool}
NAMES = {torch_dtype: name for name, torch_dtype in DTYPES.items()}


def quote(s):
    return json.dumps(s, ensure_ascii=False)


def check_header_checksum(path, header, metadata):
    """The CRC-32 of the lines "key":"value" of the other metadata, then "name":DTYPE[shape] of each tensor."""
    stored = metadata.get("ember.checksum.header")
    if stored is None:
        assert not any(k.startswith("ember.checksum") for k in metadata), f"{path}: checksums without the header's"
        return
    by_bytes = lambda item: item[0].encode()
    text = "".join(f"{quote(k)}:{quote(v)}\n" for k, v in sorted(metadata.items(), key=by_bytes)
                   if k != "ember.checksum.header")
    text += "".join(f"{quote(name)}:{e['dtype']}[{','.join(str(d) for d in e['shape'])}]\n"
                    for name, e in sorted(header.items(), key=by_bytes))
    assert int(stored, 16) == zlib.crc32(text.encode()), f"{path}: header checksum mismatch"


def read_safetensors(path):
    """{name: torch tensor}, {metadata}; checks ember's header and data checksums when present."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    metadata = header.pop("__metadata__", {})
    check_header_checksum(path, header, metadata)
    data = blob[8 + n :]
    for name, entry in header.items():
        crc = metadata.get("ember.checksum.tensor." + name)
        if crc is not None:
            begin, end = entry["data_offsets"]
            assert int(crc, 16) == zlib.crc32(data[begin:end]), f"{path}: {name}: checksum mismatch"
    if USE_PACKAGE:
        with safetensors.safe_open(path, "pt") as f:
            assert (f.metadata() or {}) == metadata, f"{path}: safetensors reads other metadata"
        return safetensors.torch.load_file(path), metadata
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        torch_dtype = DTYPES[entry["dtype"]]
        raw = bytearray(data[begin:end])
        t = torch.frombuffer(raw, dtype=torch_dtype) if raw else torch.empty(0, dtype=torch_dtype)
        tensors[name] = t.reshape(entry["shape"]).clone()
    return tensors, metadata


def write_safetensors(path, tensors, metadata=None):
    tensors = {name: t.detach().contiguous().cpu() for name, t in tensors.items()}
    if USE_PACKAGE:
        safetensors.torch.save_file(tensors, path, metadata=metadata)
        return
    header, chunks, offset = ({"__metadata__": metadata} if metadata else {}), [], 0
    for name, t in tensors.items():
        raw = (t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()).tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def mlp():  # examples/train/models.h: make_mlp({256, 128}, 0.2)
    nn = torch.nn
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.2), nn.Linear(256, 128), nn.ReLU(),
                         nn.Dropout(0.2), nn.Linear(128, 10))


def cnn():  # examples/train/models.h: make_cnn(0.25)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


NETS = {"mlp": mlp, "cnn": cnn}
FILE_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
failures = []


def compare(what, ours, theirs):
    err = (ours - theirs).abs().max().item()
    scale = theirs.abs().max().item()
    ok = err <= 1e-4 * max(1.0, scale)
    print(f"{'ok  ' if ok else 'FAIL'} {what}: max |torch - ember| = {err:.3g} (logits up to {scale:.3g})")
    if not ok:
        failures.append(what)


def ember_to_torch(helper, work, kind, dtype_name):
    where = os.path.join(work, f"ember_{kind}_{dtype_name}")
    os.makedirs(where, exist_ok=True)
    subprocess.run([helper, "write", kind, dtype_name, where], check=True)
    state, metadata = read_safetensors(os.path.join(where, "model.safetensors"))
    assert metadata.get("written_by") == "torch_interop_helper", metadata
    net = NETS[kind]()
    expected = net.state_dict()
    assert list(state) != [] and set(state) == set(expected), f"keys {sorted(state)} vs torch's {sorted(expected)}"
    for key, ref in expected.items():
        want = torch.int64 if ref.dtype == torch.int64 else FILE_DTYPES[dtype_name]
        assert state[key].shape == ref.shape, f"{key}: shape {tuple(state[key].shape)} vs torch's {tuple(ref.shape)}"
        assert state[key].dtype == want, f"{key}: dtype {state[key].dtype}, expected {want}"
    net.load_state_dict(state, strict=True)
    net.eval()
    io, _ = read_safetensors(os.path.join(where, "io.safetensors"))
    with torch.no_grad():
        compare(f"ember {kind} ({dtype_name} file) -> torch", net(io["input"]), io["logits"])


def torch_to_ember(helper, work, kind):
    where = os.path.join(work, f"torch_{kind}")
    os.makedirs(where, exist_ok=True)
    torch.manual_seed(2)
    net = NETS[kind]()
    # Float32, bfloat16 and float16 tensors in one file; the torch network
    # keeps the same rounded values in float32.
    state = {}
    with torch.no_grad():
        for i, (key, t) in enumerate(net.state_dict().items()):
            if "running_var" in key or (t.dim() == 1 and "weight" in key):
                t.copy_(torch.rand_like(t) + 0.5)
            elif "running_mean" in key:
                t.copy_(torch.randn_like(t) * 0.1)
            elif "num_batches_tracked" in key:
                t.fill_(3)
            if t.is_floating_point():
                t.copy_(t.to([torch.float32, torch.bfloat16, torch.float16][i % 3]).float())
                state[key] = t.to([torch.float32, torch.bfloat16, torch.float16][i % 3])
            else:
                state[key] = t
    assert {t.dtype for t in state.values()} >= {torch.float32, torch.bfloat16, torch.float16}
    write_safetensors(os.path.join(where, "model.safetensors"), state)
    x = torch.randn(4, 1, 28, 28)
    write_safetensors(os.path.join(where, "io.safetensors"), {"input": x})
    out = os.path.join(where, "logits.safetensors")
    subprocess.run([helper, "run", kind, os.path.join(where, "model.safetensors"),
                    os.path.join(where, "io.safetensors"), out], check=True)
    net.eval()
    with torch.no_grad():
        compare(f"torch {kind} (f32+bf16+f16 file) -> ember", read_safetensors(out)[0]["logits"], net(x))


def torch_optimizer(kind, params):  # torch_interop_helper.cpp: make_optimizer
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, betas=(0.8, 0.99), weight_decay=0.05, amsgrad=True)
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True)


def train_step(net, optimizer, io):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(net(io["input"]), io["target"]).backward()
    optimizer.step()


def compare_weights(what, net, path):
    ours, _ = read_safetensors(path)
    theirs = net.state_dict()
    err = max((ours[k] - theirs[k]).abs().max().item() for k in theirs)
    ok = set(ours) == set(theirs) and err <= 1e-5
    print(f"{'ok  ' if ok else 'FAIL'} {what}: max |torch - ember| over the weights after the step = {err:.3g}")
    if not ok:
        failures.append(what)


def optimizer_ember_to_torch(helper, work, kind):
    where = os.path.join(work, f"ember_optim_{kind}")
    os.makedirs(where, exist_ok=True)
    subprocess.run([helper, "optim-write", kind, where], check=True)
    net = mlp().eval()
    net.load_state_dict(read_safetensors(os.path.join(where, "model.safetensors"))[0])
    optimizer = torch_optimizer(kind, net.parameters())
    tensors, metadata = read_safetensors(os.path.join(where, "optim.safetensors"))
    state = {}
    for key, t in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = t
    optimizer.load_state_dict({"state": state, "param_groups": json.loads(metadata["param_groups"])})
    train_step(net, optimizer, read_safetensors(os.path.join(where, "io.safetensors"))[0])
    compare_weights(f"ember {kind} state -> torch.optim step", net, os.path.join(where, "next.safetensors"))


def optimizer_torch_to_ember(helper, work, kind):
    where = os.path.join(work, f"torch_optim_{kind}")
    os.makedirs(where, exist_ok=True)
    torch.manual_seed(4)
    net = mlp().eval()
    optimizer = torch_optimizer(kind, net.parameters())
    io = {"input": torch.randn(64, 1, 28, 28), "target": torch.randint(0, 10, (64,))}
    for _ in range(3):
        train_step(net, optimizer, io)
    write_safetensors(os.path.join(where, "model.safetensors"), net.state_dict())
    write_safetensors(os.path.join(where, "io.safetensors"), io)
    sd = optimizer.state_dict()
    tensors = {f"state.{i}.{name}": (t if torch.is_tensor(t) else torch.tensor(float(t)))
               for i, named in sd["state"].items() for name, t in named.items()}
    write_safetensors(os.path.join(where, "optim.safetensors"), tensors, {"param_groups": json.dumps(sd["param_groups"])})
    subprocess.run([helper, "optim-step", kind, where], check=True)
    train_step(net, optimizer, io)
    compare_weights(f"torch.optim {kind} state -> ember step", net, os.path.join(where, "next.safetensors"))


class TiedLm(torch.nn.Module):  # torch_interop_helper.cpp: TiedLm
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(11, 6)
        self.head = torch.nn.Linear(6, 11, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, ids):
        return self.head(self.tok(ids))


def tied_ember_to_torch(helper, work):
    where = os.path.join(work, "ember_tied")
    os.makedirs(where, exist_ok=True)
    subprocess.run([helper, "tied-write", where], check=True)
    path = os.path.join(where, "model.safetensors")
    lm = TiedLm()
    state, _ = read_safetensors(path)
    assert len(state) == 1, f"the tied table should be written once, found {sorted(state)}"
    if USE_PACKAGE:
        missing, unexpected = safetensors.torch.load_model(lm, path)
        assert not missing and not unexpected, (missing, unexpected)
    else:
        missing, unexpected = lm.load_state_dict(state, strict=False)
        assert not unexpected and set(missing) | set(state) == {"tok.weight", "head.weight"}, (missing, unexpected)
    assert lm.head.weight is lm.tok.weight
    io, _ = read_safetensors(os.path.join(where, "io.safetensors"))
    with torch.no_grad():
        compare("ember tied embedding/head -> torch", lm(io["input"]), io["logits"])


def tied_torch_to_ember(helper, work):
    where = os.path.join(work, "torch_tied")
    os.makedirs(where, exist_ok=True)
    torch.manual_seed(9)
    lm = TiedLm()
    path = os.path.join(where, "model.safetensors")
    if USE_PACKAGE:
        safetensors.torch.save_model(lm, path)
    else:
        write_safetensors(path, lm.state_dict())
    ids = torch.randint(0, 11, (2, 5))
    write_safetensors(os.path.join(where, "io.safetensors"), {"input": ids})
    out = os.path.join(where, "logits.safetensors")
    subprocess.run([helper, "tied-run", path, os.path.join(where, "io.safetensors"), out], check=True)
    with torch.no_grad():
        compare("torch tied embedding/head -> ember", read_safetensors(out)[0]["logits"], lm(ids))


def main():
    args = [a for a in sys.argv[1:] if a != "--safetensors-package"]
    if len(args) != 2:
        sys.exit(__doc__)
    helper, work = args
    os.makedirs(work, exist_ok=True)
    for kind in NETS:
        for dtype_name in FILE_DTYPES:
            ember_to_torch(helper, work, kind, dtype_name)
        torch_to_ember(helper, work, kind)
    tied_ember_to_torch(helper, work)
    tied_torch_to_ember(helper, work)
    for kind in ("adamw", "sgd"):
        optimizer_ember_to_torch(helper, work, kind)
        optimizer_torch_to_ember(helper, work, kind)
    if failures:
        sys.exit(f"torch_interop: {len(failures)} comparison(s) failed: {failures}")
    print(f"torch_interop: all comparisons agree (torch {torch.__version__}, "
          f"{'safetensors ' + safetensors.__version__ if USE_PACKAGE else 'numpy safetensors reader'})")


if __name__ == "__main__":
    main()
