"""Probe: does running a layer's weight-gradient product beside its input-gradient product
(two CUDA streams) beat running them one after the other?

For each linear layer of GPT-2 124M at the bench's shapes, times dX = dY W (m=BT, n=IC,
k=OC) and dW = dY^T X (m=OC, n=IC, k=BT) back to back on one stream, then the same two
launched on two streams that join at the end. CUDA events, warm-up first, median of the
repeats; fresh random data. Prints one row a layer and the per-layer sums.

usage: python3 bench/concurrent_products_probe.py [--reps 50]
"""
import argparse
import statistics

import torch


def time_ms(fn, reps):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def probe(bt, dtype, reps):
    C, F = 768, 3072
    layers = [("qkv", C, 3 * C), ("attn_proj", C, C), ("mlp_in", C, F), ("mlp_out", F, C)]
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    rows, tot_s, tot_c = [], 0.0, 0.0
    for name, ic, oc in layers:
        dy = torch.randn(bt, oc, device="cuda", dtype=dtype)
        x = torch.randn(bt, ic, device="cuda", dtype=dtype)
        w = torch.randn(oc, ic, device="cuda", dtype=dtype)
        dx = torch.empty(bt, ic, device="cuda", dtype=dtype)
        dw = torch.empty(oc, ic, device="cuda", dtype=dtype)

        def serial():
            torch.matmul(dy, w, out=dx)
            torch.matmul(dy.t(), x, out=dw)

        def concurrent():
            side.wait_stream(main)
            torch.matmul(dy, w, out=dx)
            with torch.cuda.stream(side):
                torch.matmul(dy.t(), x, out=dw)
            main.wait_stream(side)

        t_dx = time_ms(lambda: torch.matmul(dy, w, out=dx), reps)
        t_dw = time_ms(lambda: torch.matmul(dy.t(), x, out=dw), reps)
        t_s = time_ms(serial, reps)
        t_c = time_ms(concurrent, reps)
        tot_s += t_s
        tot_c += t_c
        rows.append((name, t_dx, t_dw, t_s, t_c))
    print(f"BT={bt} {dtype}")
    print(f"{'layer':10s} {'dX us':>8s} {'dW us':>8s} {'serial':>8s} {'2 streams':>9s} {'gain':>6s}")
    for name, a, b, s, c in rows:
        print(f"{name:10s} {a*1e3:8.1f} {b*1e3:8.1f} {s*1e3:8.1f} {c*1e3:9.1f} {100*(s-c)/s:5.1f}%")
    print(f"{'sum':10s} {'':8s} {'':8s} {tot_s*1e3:8.1f} {tot_c*1e3:9.1f} {100*(tot_s-tot_c)/tot_s:5.1f}%")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(torch.cuda.get_device_name(), torch.__version__)
    probe(4096, torch.float32, a.reps)
    probe(16384, torch.bfloat16, a.reps)


if __name__ == "__main__":
    main()
