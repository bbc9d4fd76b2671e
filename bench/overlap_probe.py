"""Probe: would a step gain from running the optimizer beside the next step's forward?

GPT-2 124M at 16x1024 bf16: the forward's products of 12 layers (qkv, attention output,
MLP input, MLP output; bf16, fresh random data) on one stream, and a fused AdamW over
12 layers' worth of fp32 parameters (7.08M each, the bytes our optimizer moves) on another.
Times each alone, the two one after the other on one stream, and the two on two streams
that join at the end. The GPU first runs the mix for a few seconds so that its clock sits
where a training run's does (power-capped). Also times an in-place pass over a
[16384, 50304] bf16 buffer (the cross-entropy's bytes: one read, one write) and a copy
of the same size, the memory rate a step's memory-bound kernels can reach there.
CUDA events, median of the repeats.

usage: python3 bench/overlap_probe.py [--reps 20]
"""
import argparse
import time

import torch

from concurrent_products_probe import time_ms  # median of CUDA-event timings after warm-up


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    torch.manual_seed(1)
    print(torch.cuda.get_device_name(), torch.__version__)
    BT, C, F, L = 16384, 768, 3072, 12
    bf = torch.bfloat16
    x = torch.randn(BT, C, device="cuda", dtype=bf)
    h = torch.randn(BT, F, device="cuda", dtype=bf)
    shapes = [(C, 3 * C), (C, C), (C, F), (F, C)]
    ws = [[torch.randn(oc, ic, device="cuda", dtype=bf) * 0.02 for ic, oc in shapes] for _ in range(L)]
    outs = [torch.empty(BT, oc, device="cuda", dtype=bf) for _, oc in shapes]
    n = 7_087_872
    params = [torch.randn(n, device="cuda") for _ in range(L)]
    grads = [torch.randn(n, device="cuda") * 1e-3 for _ in range(L)]
    m1 = [torch.zeros(n, device="cuda") for _ in range(L)]
    m2 = [torch.zeros(n, device="cuda") for _ in range(L)]
    steps = [torch.zeros((), device="cuda") for _ in range(L)]
    main_s = torch.cuda.current_stream()
    side = torch.cuda.Stream()

    def gemms():
        for l in range(L):
            for (ic, _), w, o in zip(shapes, ws[l], outs):
                torch.matmul(x if ic == C else h, w.t(), out=o)

    def opt():
        torch._fused_adamw_(params, grads, m1, m2, [], steps, lr=1e-4, beta1=0.9, beta2=0.95,
                            weight_decay=0.1, eps=1e-8, amsgrad=False, maximize=False)

    def serial():
        opt()
        gemms()

    def concurrent():
        side.wait_stream(main_s)
        with torch.cuda.stream(side):
            opt()
        gemms()
        main_s.wait_stream(side)

    logits = torch.randn(BT, 50304, device="cuda", dtype=bf)
    other = torch.empty_like(logits)

    t0 = time.time()
    while time.time() - t0 < 4.0:
        serial()
    torch.cuda.synchronize()
    r = {}
    for name, fn in (("products", gemms), ("adamw", opt), ("serial", serial),
                     ("two streams", concurrent), ("products again", gemms),
                     ("adamw again", opt)):
        r[name] = time_ms(fn, a.reps)
        print(f"{name:16s} {r[name]:8.3f} ms")
    gain = r["serial"] - r["two streams"]
    print(f"two streams save {gain:.3f} ms of {r['adamw']:.3f} ms of AdamW "
          f"({100 * gain / r['serial']:.1f}% of serial)")
    nbytes = logits.numel() * 2
    t_inplace = time_ms(lambda: logits.mul_(1.0001), a.reps)
    t_copy = time_ms(lambda: other.copy_(logits), a.reps)
    print(f"in-place pass over {nbytes / 1e9:.2f} GB: {t_inplace:.3f} ms "
          f"({2 * nbytes / t_inplace / 1e9:.2f} TB/s); copy {t_copy:.3f} ms "
          f"({2 * nbytes / t_copy / 1e9:.2f} TB/s)")


if __name__ == "__main__":
    main()
