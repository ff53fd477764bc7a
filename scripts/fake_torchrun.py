#!/usr/bin/env python3
# A stand-in for torchrun's agent where only an older PyTorch is installed
# (Debian's 1.13, whose torchrun cannot run here): it hosts a torch TCPStore
# and starts the workers with the variables torch 2.x's agent gives them, so
# that scripts/torchrun_check.sh can be tried without torch 2.x.
#
#   fake_torchrun.py --standalone --nproc-per-node 2 build/examples/ember-train ...
#   fake_torchrun.py --rdzv-backend c10d --rdzv-endpoint localhost:29400 --nnodes 1 --nproc-per-node 2 prog ...
#
# The workers get RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
# ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (the store's),
# TORCHELASTIC_USE_AGENT_STORE=True, TORCHELASTIC_RESTART_COUNT=0,
# TORCHELASTIC_MAX_RESTARTS=0 and TORCHELASTIC_RUN_ID. It exits with the first
# failing worker's status (the others are killed), else 0. One node only.
import argparse
import datetime
import os
import subprocess
import sys
import time

import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--standalone", action="store_true")
    ap.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1)
    ap.add_argument("--nnodes", default="1")
    ap.add_argument("--rdzv-backend", "--rdzv_backend", default="static")
    ap.add_argument("--rdzv-endpoint", "--rdzv_endpoint", default="")
    # torchrun runs a non-Python program only with --no-python; this agent
    # always runs the program directly, so the flag changes nothing here.
    ap.add_argument("--no-python", "--no_python", action="store_true")
    ap.add_argument("program")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    if a.nnodes != "1":
        sys.exit("fake_torchrun.py: one node only")
    port = 0
    if not a.standalone and a.rdzv_endpoint:
        port = int(a.rdzv_endpoint.rsplit(":", 1)[1])
    store = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=300),
                          wait_for_workers=False)
    n = a.nproc_per_node
    workers = []
    for local in range(n):
        env = dict(os.environ)
        env.update(RANK=str(local), LOCAL_RANK=str(local), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                   GROUP_RANK="0", ROLE_RANK=str(local), ROLE_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True",
                   TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0", TORCHELASTIC_RUN_ID="fake")
        workers.append(subprocess.Popen([a.program] + a.args, env=env))
    status = 0
    while any(w.poll() is None for w in workers) and status == 0:
        for w in workers:
            if w.poll() not in (None, 0):
                status = w.returncode if w.returncode > 0 else 128 - w.returncode
        time.sleep(0.05)
    for w in workers:
        if w.poll() is None:
            w.kill()
        w.wait()
        if status == 0 and w.returncode != 0:
            status = w.returncode if w.returncode > 0 else 128 - w.returncode
    sys.exit(status)


if __name__ == "__main__":
    main()
