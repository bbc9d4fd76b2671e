"""comm_torch.py: the peer of `llmbench comm all_reduce` in torch.distributed over NCCL.

Run by torchrun, one process per GPU. For each size: warm-up calls, then timed in-place
all_reduces of bf16 back to back between two CUDA events; the time is the slowest rank's
mean per call (as llmbench comm reports it), busbw = size / time x 2(n-1)/n. Prints one
JSON line per size on rank 0."""
import argparse
import json
import os

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", required=True, help="comma-separated byte sizes")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    n = dist.get_world_size()
    for size in (int(s) for s in args.sizes.split(",")):
        x = torch.zeros(size // 2, dtype=torch.bfloat16, device="cuda")
        for _ in range(args.warmup):
            dist.all_reduce(x)
        dist.barrier()
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        t = torch.tensor([start.elapsed_time(end) * 1e3 / args.iters], device="cuda",
                         dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        us = t.item()
        algbw = size / (us * 1e3)
        if dist.get_rank() == 0:
            print(json.dumps({"impl": "torch.distributed", "torch": torch.__version__,
                              "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                              "ranks": n, "bytes": size, "time_us": round(us, 3),
                              "algbw": round(algbw, 3),
                              "busbw": round(algbw * 2 * (n - 1) / n, 3)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
