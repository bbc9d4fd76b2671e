#!/usr/bin/env python3
"""PyTorch DDP peer of `llmbench train --gpus N`: the model and optimizer of
tools/pytorch_gpt2_baseline.py (imported, not copied) wrapped in DistributedDataParallel with
its default buckets (25 MiB), compiled with torch.compile, one process per GPU under torchrun:

    torchrun --standalone --nproc-per-node 2 bench/pytorch_ddp_baseline.py --batch 16 --seq 1024

--batch is per GPU. Every rank draws its own uniform batch each step (outside the timed
region). A step is timed with CUDA events on each rank; the step time of the run is the
slowest rank's per step (all-reduced MAX), so tokens/s = N x B x T x steps / sum of those.
Rank 0 prints one JSON line: tokens/s total and per GPU, median step, peak memory per rank
(torch.cuda.max_memory_allocated, the largest over ranks) and the final loss."""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

# tools/ in the source tree, or this folder where the bench scripts travel with it
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "tools")]
from pytorch_gpt2_baseline import PRESETS, Model, make_step  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-124m", choices=list(PRESETS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    c = PRESETS[a.model]
    model = Model(c, a.seq).to(dev)
    ddp = DDP(model, device_ids=[local])
    step = make_step(model, ddp if a.no_compile else torch.compile(ddp), a.precision)

    g = torch.Generator(device=dev).manual_seed(1 + rank)

    def batch():
        return (torch.randint(0, c["vocab"], (a.batch, a.seq), device=dev, generator=g),
                torch.randint(0, c["vocab"], (a.batch, a.seq), device=dev, generator=g))
    for _ in range(a.warmup):
        step(*batch())
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(a.steps)]
    losses = []
    for i in range(a.steps):
        x, y = batch()
        ev[i][0].record()
        losses.append(step(x, y).detach())
        ev[i][1].record()
    torch.cuda.synchronize()
    ms = torch.tensor([e0.elapsed_time(e1) for e0, e1 in ev], device=dev)
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    peak = torch.tensor([torch.cuda.max_memory_allocated()], device=dev, dtype=torch.float64)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    loss = torch.stack(losses[-1:]).float()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    if rank == 0:
        slowest = sorted(ms.tolist())
        total_s = sum(slowest) / 1e3
        tok = world * a.batch * a.seq * a.steps / total_s
        print(json.dumps({"impl": "pytorch-ddp" + ("" if a.no_compile else "+compile"),
                          "torch": torch.__version__, "model": a.model, "gpus": world,
                          "batch_per_gpu": a.batch, "seq": a.seq, "precision": a.precision,
                          "step_ms_median": slowest[len(slowest) // 2], "tokens_per_s": tok,
                          "tokens_per_s_per_gpu": tok / world,
                          "peak_mem_bytes_per_rank": int(peak.item()),
                          "final_loss": float(loss.item()),
                          "device": torch.cuda.get_device_name()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
