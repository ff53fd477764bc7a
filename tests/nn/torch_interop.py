#!/usr/bin/env python3
"""Checkpoints that PyTorch opens, and back (nn/serialize.h).

Usage: torch_interop.py HELPER WORKDIR, HELPER being tests/nn/torch_interop_helper.

(a) ember writes ember-train's MLP and CNN (random weights, float32, bfloat16
    and float16 files) with nn::save; this script loads each into the same
    torch.nn.Sequential with load_state_dict(strict=True), after checking the
    keys, shapes and dtypes against PyTorch's own state_dict and the data
    against ember's CRC-32 checksums, and compares the logits on ember's input.
(b) The reverse: a PyTorch network's state_dict, written by this script with
    float32, bfloat16 and float16 tensors, loads into ember with nn::load and
    gives PyTorch's logits.

The safetensors format is read and written here in a few lines of numpy (no
safetensors package). Exits 77 (ctest's SKIP_RETURN_CODE) without torch or
numpy.
"""
import json
import os
import struct
import subprocess
import sys
import zlib

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP: torch_interop needs python3-torch and python3-numpy ({e})")
    sys.exit(77)

# safetensors dtype <-> (numpy dtype of the bytes, torch dtype); bfloat16 travels as uint16.
DTYPES = {
    "F32": (np.float32, torch.float32),
    "F64": (np.float64, torch.float64),
    "F16": (np.float16, torch.float16),
    "BF16": (np.uint16, torch.bfloat16),
    "I32": (np.int32, torch.int32),
    "I64": (np.int64, torch.int64),
    "BOOL": (np.bool_, torch.bool),
}
NAMES = {torch_dtype: name for name, (_, torch_dtype) in DTYPES.items()}


def read_safetensors(path):
    """{name: torch tensor}, {metadata}; checks ember's data checksums when present."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    metadata = header.pop("__metadata__", {})
    data = blob[8 + n :]
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = data[begin:end]
        crc = metadata.get("ember.checksum.tensor." + name)
        if crc is not None:
            assert int(crc, 16) == zlib.crc32(raw), f"{path}: {name}: checksum mismatch"
        np_dtype, torch_dtype = DTYPES[entry["dtype"]]
        array = np.frombuffer(raw, dtype=np_dtype).reshape(entry["shape"]).copy()
        t = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16) if entry["dtype"] == "BF16" else torch.from_numpy(array)
        tensors[name] = t
    return tensors, metadata


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
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


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    helper, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    for kind in NETS:
        for dtype_name in FILE_DTYPES:
            ember_to_torch(helper, work, kind, dtype_name)
        torch_to_ember(helper, work, kind)
    if failures:
        sys.exit(f"torch_interop: {len(failures)} comparison(s) failed: {failures}")
    print("torch_interop: all comparisons agree")


if __name__ == "__main__":
    main()
