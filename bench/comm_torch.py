"""comm_torch.py: the peer of `llmbench comm` in torch.distributed over NCCL.

Run by torchrun, one process per GPU. For each collective of --ops (all_reduce in place,
all_gather and reduce_scatter out of place) and each size: a bf16 buffer of random values,
warm-up calls, then timed calls back to back between two CUDA events; the time is the
slowest rank's mean per call (as llmbench comm reports it). The size is nccl-tests' (the
whole buffer: all_gather's output, reduce_scatter's input), busbw = size / time x
2(n-1)/n for all_reduce and (n-1)/n for the other two. Prints one JSON line per
collective and size on rank 0."""
import argparse
import json
import os

import torch
import torch.distributed as dist


def time_one(op, size, n, args):
    elems = max(size // 2, n)
    big = torch.randn(elems - elems % n, device="cuda").to(torch.bfloat16)
    part = torch.empty(big.numel() // n, dtype=torch.bfloat16, device="cuda")
    if op == "all_reduce":
        call, factor = (lambda: dist.all_reduce(big)), 2 * (n - 1) / n
    elif op == "all_gather":
        part.copy_(big[: part.numel()])
        call, factor = (lambda: dist.all_gather_into_tensor(big, part)), (n - 1) / n
    elif op == "reduce_scatter":
        call, factor = (lambda: dist.reduce_scatter_tensor(part, big)), (n - 1) / n
    else:
        raise SystemExit(f"--ops: unknown collective {op}")
    for _ in range(args.warmup):
        call()
    dist.barrier()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.iters):
        call()
    end.record()
    torch.cuda.synchronize()
    t = torch.tensor([start.elapsed_time(end) * 1e3 / args.iters], device="cuda",
                     dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    us = t.item()
    nbytes = big.numel() * 2
    algbw = nbytes / (us * 1e3)
    if dist.get_rank() == 0:
        print(json.dumps({"impl": "torch.distributed", "torch": torch.__version__,
                          "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                          "op": op, "ranks": n, "bytes": nbytes, "time_us": round(us, 3),
                          "algbw": round(algbw, 3), "busbw": round(algbw * factor, 3)}),
              flush=True)
    del big, part


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", required=True, help="comma-separated byte sizes")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--ops", default="all_reduce",
                    help="comma-separated: all_reduce, all_gather, reduce_scatter")
    args = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    n = dist.get_world_size()
    for op in args.ops.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            time_one(op, size, n, args)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
