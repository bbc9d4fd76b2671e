"""sdpa_backends_probe.py: time PyTorch's scaled_dot_product_attention backends (flash,
cuDNN, memory-efficient, and whatever PyTorch picks by default) forward and forward +
backward at the attention shapes of the training bench, causal, on fresh random data,
with CUDA events after warm-up; medians of 20 runs, per layer. Prints the cuDNN version
PyTorch runs and where its library lies, so a cuDNN attention path of our own knows what
it would meet on this machine.

usage: python3 bench/sdpa_backends_probe.py
"""
import glob
import os
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [  # name, batch, query heads, kv heads, seq, head dim
    ("gpt2 16x1024", 16, 12, 12, 1024, 64),
    ("gpt2 64x1024", 64, 12, 12, 1024, 64),
    ("gpt2 32x128", 32, 12, 12, 128, 64),
    ("llama3.2-1b 8x1024", 8, 32, 8, 1024, 64),
]
BACKENDS = [("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def median_ms(fn, reps=20, warm=5):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version(),
          "device", torch.cuda.get_device_name())
    roots = {os.path.dirname(torch.__file__) + "/..", "/usr/lib", "/usr/local"}
    libs = sorted({p for r in roots for p in glob.glob(r + "/**/libcudnn.so*",
                                                       recursive=True)})
    print("libcudnn:", " ".join(os.path.realpath(p) for p in libs) or "none found")
    print("%-20s %-10s %9s %9s %9s" % ("shape", "backend", "fwd ms", "f+b ms", "bwd ms"))
    for name, b, hq, hkv, t, d in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(1)
        q = torch.randn(b, hq, t, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(b, hkv, t, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(b, hkv, t, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        dout = torch.randn(b, hq, t, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        gqa = hq != hkv
        for bname, backend in BACKENDS:
            qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))

            def fwd():
                with torch.no_grad():
                    F.scaled_dot_product_attention(qq, kk, vv, is_causal=True,
                                                   enable_gqa=gqa)

            def fwdbwd():
                o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True,
                                                   enable_gqa=gqa)
                o.backward(dout)

            try:
                if backend is None:
                    f, fb = median_ms(fwd), median_ms(fwdbwd)
                else:
                    with sdpa_kernel(backend):
                        f, fb = median_ms(fwd), median_ms(fwdbwd)
                print("%-20s %-10s %9.3f %9.3f %9.3f" % (name, bname, f, fb, fb - f))
            except RuntimeError as e:
                print("%-20s %-10s unavailable: %s" % (name, bname, str(e).splitlines()[0][:60]))
    if hasattr(torch.backends.cuda, "cudnn_sdp_enabled"):
        print("cudnn sdp enabled by default:", torch.backends.cuda.cudnn_sdp_enabled())


if __name__ == "__main__":
    main()
