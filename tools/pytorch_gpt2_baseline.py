#!/usr/bin/env python3
"""PyTorch baseline for `llmbench train`: the same GPT-2 and Llama models, trained the way a
PyTorch user would (torch.compile, autocast, fused AdamW), timed with CUDA events.

Plain modules written here (no transformers library): GPT-2 (LayerNorm, GELU-tanh MLP,
learned positions, tied embeddings, biases) and Llama (RMSNorm, SwiGLU, RoPE with llama3
scaling, grouped-query attention, tied embeddings), attention through
F.scaled_dot_product_attention(is_causal=True). AdamW: lr 3e-4, betas (0.9, 0.95), eps
1e-8, weight decay 0.1 on 2-D tensors only, global-norm clip 1.0 (llmbench's defaults).
fp16 uses a GradScaler; fp32 leaves TF32 off (PyTorch's default for matmuls). Random
token batches, a fresh one per step (drawn outside the timed region). Prints one JSON line with the median step time,
tokens/s and peak memory.

With --lora-rank R: LoRA fine-tuning as `llmbench train --lora-rank` does it: the base
built in the compute type (bf16/fp16) and frozen, adapters A [r, in] (uniform
+-1/sqrt(in)) and B [out, r] (zero) in fp32 on the chosen projections of the fused q/k/v
and gate/up products, scaled by alpha / r; fused AdamW (fp32 state) and clipping over the
adapters only, weight decay 0.1 on them; torch.compile per block (regional compilation:
the 32 blocks of a 7-8B model share one compiled graph, minutes of compile time saved).
No NF4: bitsandbytes is not installed where this runs."""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    "gpt2-124m": dict(family="gpt2", vocab=50257, max_seq=1024, n_layer=12, n_head=12, n_kv=12,
                      d=768, d_ff=3072, eps=1e-5),
    "llama3.2-1b": dict(family="llama", vocab=128256, max_seq=131072, n_layer=16, n_head=32,
                        n_kv=8, d=2048, d_ff=8192, eps=1e-5, theta=500000.0,
                        scaling=(32.0, 1.0, 4.0, 8192)),
    "llama3.1-8b": dict(family="llama", vocab=128256, max_seq=131072, n_layer=32, n_head=32,
                        n_kv=8, d=4096, d_ff=14336, eps=1e-5, theta=500000.0,
                        scaling=(8.0, 1.0, 4.0, 8192), tied=False),
    "mistral-7b": dict(family="llama", vocab=32000, max_seq=32768, n_layer=32, n_head=32,
                       n_kv=8, d=4096, d_ff=14336, eps=1e-5, theta=1000000.0, scaling=None,
                       tied=False),
}
TARGETS = ("q", "k", "v", "o", "gate", "up", "down")


class Lora(nn.Module):
    """Adapters on some row blocks of one linear map: y += s (x A_t^T) B_t^T on block t."""

    def __init__(self, base, blocks, rank, alpha):
        super().__init__()
        self.base, self.scale = base, alpha / rank
        self.blocks = [(name, start, out) for name, start, out in blocks]
        inp = base.in_features
        self.a = nn.ParameterList([nn.Parameter(torch.empty(rank, inp, dtype=torch.float32).uniform_(
            -1 / math.sqrt(inp), 1 / math.sqrt(inp))) for _ in blocks])
        self.b = nn.ParameterList([nn.Parameter(torch.zeros(out, rank, dtype=torch.float32))
                                   for _, _, out in blocks])

    def forward(self, x):
        y = self.base(x)
        parts, at = [], 0
        for (_, start, out), a, b in zip(self.blocks, self.a, self.b):
            if start > at:
                parts.append(y[..., at:start])
            parts.append(y[..., start:start + out] + self.scale * F.linear(F.linear(x, a), b))
            at = start + out
        if at < y.shape[-1]:
            parts.append(y[..., at:])
        return torch.cat(parts, dim=-1)


def add_lora(model, c, rank, alpha, targets):
    """Freezes the model and wraps the projections that carry targets."""
    model.requires_grad_(False)
    d, hd = c["d"], c["d"] // c["n_head"]
    q, kv, ff = c["n_head"] * hd, c["n_kv"] * hd, c["d_ff"]
    llama = c["family"] == "llama"
    where = {"qkv": [("q", 0, q), ("k", q, kv), ("v", q + kv, kv)], "attn_out": [("o", 0, d)],
             "mlp_in": [("gate", 0, ff), ("up", ff, ff)] if llama else [("up", 0, ff)],
             "mlp_out": [("down", 0, d)]}
    for blk in model.blocks:
        for attr, blocks in where.items():
            chosen = [b for b in blocks if b[0] in targets]
            if chosen:
                setattr(blk, attr, Lora(getattr(blk, attr), chosen, rank, alpha).to(model.wte.weight.device))


def rope_freqs(c):
    hd = c["d"] // c["n_head"]
    inv = 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    if c["scaling"] is None:
        return inv.float()
    factor, lo, hi, orig = c["scaling"]
    wavelen = 2 * math.pi / inv
    smooth = (orig / wavelen - lo) / (hi - lo)
    scaled = torch.where(wavelen > orig / lo, inv / factor, inv)
    mid = (wavelen >= orig / hi) & (wavelen <= orig / lo)
    return torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled).float()


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d, hd = c["d"], c["d"] // c["n_head"]
        llama = c["family"] == "llama"
        Norm = (lambda n: nn.RMSNorm(n, eps=c["eps"])) if llama else (lambda n: nn.LayerNorm(n, eps=c["eps"]))
        self.norm1, self.norm2 = Norm(d), Norm(d)
        self.qkv = nn.Linear(d, (c["n_head"] + 2 * c["n_kv"]) * hd, bias=not llama)
        self.attn_out = nn.Linear(d, d, bias=not llama)
        self.mlp_in = nn.Linear(d, (2 if llama else 1) * c["d_ff"], bias=not llama)
        self.mlp_out = nn.Linear(c["d_ff"], d, bias=not llama)

    def forward(self, x, cos, sin):
        c = self.c
        B, T, d = x.shape
        nh, nkv, hd = c["n_head"], c["n_kv"], d // c["n_head"]
        qkv = self.qkv(self.norm1(x))
        q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q = q.view(B, T, nh, hd).transpose(1, 2)
        k = k.view(B, T, nkv, hd).transpose(1, 2)
        v = v.view(B, T, nkv, hd).transpose(1, 2)
        if cos is not None:
            def rot(t):
                t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
                return t * cos + torch.cat([-t2, t1], dim=-1) * sin
            q, k = rot(q), rot(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=nkv != nh)
        x = x + self.attn_out(y.transpose(1, 2).reshape(B, T, d))
        h = self.mlp_in(self.norm2(x))
        if c["family"] == "llama":
            g, u = h.chunk(2, dim=-1)
            h = F.silu(g) * u
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.mlp_out(h)


class Model(nn.Module):
    def __init__(self, c, T):
        super().__init__()
        self.c = c
        self.wte = nn.Embedding(c["vocab"], c["d"])
        llama = c["family"] == "llama"
        self.wpe = None if llama else nn.Embedding(c["max_seq"], c["d"])
        self.blocks = nn.ModuleList([Block(c) for _ in range(c["n_layer"])])
        self.normf = nn.RMSNorm(c["d"], eps=c["eps"]) if llama else nn.LayerNorm(c["d"], eps=c["eps"])
        self.lm_head = None if c.get("tied", True) else nn.Linear(c["d"], c["vocab"], bias=False)
        std_resid = 0.02 / math.sqrt(2 * c["n_layer"])
        for n, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, std_resid if n.endswith(("attn_out.weight", "mlp_out.weight")) else 0.02)
            elif n.endswith("bias"):
                nn.init.zeros_(p)
        if llama:
            pos = torch.arange(T, dtype=torch.float32)[:, None] * rope_freqs(c)[None, :]
            ang = torch.cat([pos, pos], dim=-1)
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)
        else:
            self.cos = self.sin = None

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        head = self.wte.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(self.normf(x), head)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def make_step(model, fwd, precision):
    """One training step as llmbench takes it: forward through fwd (the model, compiled or
    wrapped) under autocast, backward (with a GradScaler in fp16), global-norm clip 1.0,
    fused AdamW (lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on 2-D tensors
    only) over the parameters that require gradients (with LoRA: the adapters). Returns
    step(x, y) -> loss."""
    trained = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trained if p.dim() == 2]
    no_decay = [p for p in trained if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")

    def step(x, y):
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            loss = fwd(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-124m", choices=list(PRESETS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--lora-rank", type=int, default=0, help="LoRA adapters of this rank on a frozen base")
    ap.add_argument("--lora-alpha", type=float, default=16.0)
    ap.add_argument("--lora-targets", default="all", help="comma-separated from q,k,v,o,gate,up,down, or all")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after timing, profile 3 more steps and print the N kernels "
                         "with the most GPU time to stderr")
    a = ap.parse_args()
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    c = PRESETS[a.model]
    dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[a.precision]
    if a.lora_rank > 0:  # the frozen base in the compute type, built there
        torch.set_default_dtype(dtype or torch.float32)
        with torch.device(dev):
            model = Model(c, a.seq)
        torch.set_default_dtype(torch.float32)
        targets = TARGETS if a.lora_targets == "all" else tuple(a.lora_targets.split(","))
        add_lora(model, c, a.lora_rank, a.lora_alpha, targets)
    else:
        model = Model(c, a.seq).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    if a.no_compile:
        fwd = model
    elif a.lora_rank > 0:
        for b in model.blocks:
            b.compile()
        fwd = model
    else:
        fwd = torch.compile(model)
    step = make_step(model, fwd, a.precision)

    g = torch.Generator(device=dev).manual_seed(1)

    def batch():  # a fresh uniform batch every step, like llmbench's synthetic data
        return (torch.randint(0, c["vocab"], (a.batch, a.seq), device=dev, generator=g),
                torch.randint(0, c["vocab"], (a.batch, a.seq), device=dev, generator=g))
    t0 = time.time()
    for i in range(a.warmup):
        step(*batch())
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    torch.cuda.reset_peak_memory_stats()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.steps)]
    losses = []
    for i in range(a.steps):
        x, y = batch()
        ev[i][0].record()
        losses.append(step(x, y).detach())
        ev[i][1].record()
    torch.cuda.synchronize()
    ms = sorted(e0.elapsed_time(e1) for e0, e1 in ev)
    med = ms[len(ms) // 2]
    total_s = sum(ms) / 1e3
    print(json.dumps({"impl": "pytorch" + ("" if a.no_compile else "+compile"), "torch": torch.__version__,
                      "model": a.model, "batch": a.batch, "seq": a.seq, "precision": a.precision,
                      "params": n_params, "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
                      "lora_rank": a.lora_rank, "step_ms_median": med,
                      "tokens_per_s": a.batch * a.seq * a.steps / total_s,
                      "samples_per_s": a.batch * a.steps / total_s,
                      "peak_mem_bytes": torch.cuda.max_memory_allocated(),
                      "final_loss": float(losses[-1]), "warmup_s": warm_s,
                      "device": torch.cuda.get_device_name()}), flush=True)
    if a.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(3):
                step(*batch())
            torch.cuda.synchronize()
        print("GPU time of 3 steps by kernel:", file=sys.stderr)
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=a.profile,
                                        max_name_column_width=90), file=sys.stderr)


if __name__ == "__main__":
    main()
