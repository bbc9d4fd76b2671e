#!/usr/bin/env python3
"""make_fixture.py: PyTorch fixtures for the CPU reference model's parity tests.

Builds gpt2-tiny and llama-tiny (the presets of src/model/config.c, repeated below) from
plain torch functions, not from a model library, and writes for each one safetensors file
tests/fixtures/<model>.safetensors holding:

  <param name>        F32   initial weights, in llmbench's layout and names (config.h)
  inputs, targets     I32   [B, T] token batch (targets = inputs shifted by one)
  logits              F32   [B, T, V] at the initial weights
  loss                F64   [1] mean cross-entropy at the initial weights
  grad.<param name>   F32   gradient of the loss at the initial weights
  adamw.losses        F64   [STEPS] loss before each of STEPS AdamW steps
  adamw.grad_norms    F64   [STEPS] global gradient norm before clipping, each step
  __metadata__              model name, B, T, the AdamW settings, torch version

The math runs in float64 on the CPU from weights first rounded to float32 (so the file's
weights are exactly the weights used); results are then stored as float32 (F64 for
losses). AdamW is torch.optim.AdamW with weight decay on 2-D tensors only and
clip_grad_norm_ before every step, as lb_model_adamw_step does.

Usage: python3 tools/make_fixture.py --out DIR
"""
import argparse
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

CONFIGS = {
    "gpt2-tiny": dict(family="gpt2", vocab=128, max_seq=32, n_layer=2, n_head=4,
                      n_kv_head=4, d_model=32, d_ff=128, eps=1e-5, tied=True, bias=True,
                      B=4, T=32),
    "llama-tiny": dict(family="llama", vocab=128, max_seq=64, n_layer=2, n_head=4,
                       n_kv_head=2, d_model=64, d_ff=96, eps=1e-5, tied=False, bias=False,
                       rope_theta=10000.0, rope_scaling=dict(factor=8.0, low=1.0, high=4.0,
                                                             original_max_pos=32),
                       B=3, T=48),
}
ADAMW = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0)
STEPS = 10
SEED = 1234


def layout(c):
    """(name, shape) in llmbench's storage order (src/model/config.h)."""
    V, d, hd = c["vocab"], c["d_model"], c["d_model"] // c["n_head"]
    Q = (c["n_head"] + 2 * c["n_kv_head"]) * hd
    Fin = 2 * c["d_ff"] if c["family"] == "llama" else c["d_ff"]
    gpt2 = c["family"] == "gpt2"
    out = [("wte", (V, d))]
    if gpt2:
        out.append(("wpe", (c["max_seq"], d)))
    for l in range(c["n_layer"]):
        p = "h.%d." % l
        out.append((p + "norm1.w", (d,)))
        if gpt2:
            out.append((p + "norm1.b", (d,)))
        out.append((p + "qkv.w", (Q, d)))
        if c["bias"]:
            out.append((p + "qkv.b", (Q,)))
        out.append((p + "attn_out.w", (d, d)))
        if c["bias"]:
            out.append((p + "attn_out.b", (d,)))
        out.append((p + "norm2.w", (d,)))
        if gpt2:
            out.append((p + "norm2.b", (d,)))
        out.append((p + "mlp_in.w", (Fin, d)))
        if c["bias"]:
            out.append((p + "mlp_in.b", (Fin,)))
        out.append((p + "mlp_out.w", (d, c["d_ff"])))
        if c["bias"]:
            out.append((p + "mlp_out.b", (d,)))
    out.append(("normf.w", (d,)))
    if gpt2:
        out.append(("normf.b", (d,)))
    if not c["tied"]:
        out.append(("lm_head", (V, d)))
    return out


def init_params(c, gen):
    """Random weights larger than GPT-2's 0.02 so attention and norms are far from trivial;
    non-zero biases and norm weights so their gradients are exercised. Rounded to float32."""
    params = {}
    for name, shape in layout(c):
        if len(shape) == 2:
            t = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.2
        elif name.endswith(".w"):  # norm weights
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
        else:  # biases
            t = 0.05 * torch.randn(shape, generator=gen, dtype=torch.float64)
        params[name] = t.to(torch.float32).to(torch.float64).requires_grad_(True)
    return params


def rope_inv_freq(c):
    """theta^(-2i/hd), then llama3 scaling (HF rope_type "llama3"); stored as float32."""
    hd = c["d_model"] // c["n_head"]
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    s = c.get("rope_scaling")
    if s:
        low_wl = s["original_max_pos"] / s["low"]
        high_wl = s["original_max_pos"] / s["high"]
        wl = 2 * math.pi / inv
        scaled = torch.where(wl > low_wl, inv / s["factor"], inv)
        smooth = (s["original_max_pos"] / wl - s["low"]) / (s["high"] - s["low"])
        smoothed = (1 - smooth) * scaled / s["factor"] + smooth * scaled
        medium = (wl >= high_wl) & (wl <= low_wl)
        inv = torch.where(medium, smoothed, scaled)
    return inv.to(torch.float32).to(torch.float64)


def apply_rope(x, inv_freq):
    """x [B, H, T, hd], rotate-half convention."""
    T, hd = x.shape[2], x.shape[3]
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # [T, hd/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def forward(c, P, idx, targets):
    B, T = idx.shape
    d, nh, nkv = c["d_model"], c["n_head"], c["n_kv_head"]
    hd = d // nh
    gpt2 = c["family"] == "gpt2"

    def norm(x, prefix):
        if gpt2:
            return F.layer_norm(x, (d,), P[prefix + ".w"], P[prefix + ".b"], c["eps"])
        return F.rms_norm(x, (d,), P[prefix + ".w"], c["eps"])

    def linear(x, prefix):
        return F.linear(x, P[prefix + ".w"], P.get(prefix + ".b"))

    x = P["wte"][idx]
    if gpt2:
        x = x + P["wpe"][:T]
    inv_freq = None if gpt2 else rope_inv_freq(c)
    for l in range(c["n_layer"]):
        p = "h.%d." % l
        qkv = linear(norm(x, p + "norm1"), p + "qkv")
        q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q = q.view(B, T, nh, hd).transpose(1, 2)
        k = k.view(B, T, nkv, hd).transpose(1, 2)
        v = v.view(B, T, nkv, hd).transpose(1, 2)
        if not gpt2:
            q, k = apply_rope(q, inv_freq), apply_rope(k, inv_freq)
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, d)
        x = x + linear(y, p + "attn_out")
        h = linear(norm(x, p + "norm2"), p + "mlp_in")
        if gpt2:
            h = F.gelu(h, approximate="tanh")
        else:
            gate, up = h.split(c["d_ff"], dim=-1)
            h = F.silu(gate) * up
        x = x + linear(h, p + "mlp_out")
    x = norm(x, "normf")
    logits = F.linear(x, P["wte"] if c["tied"] else P["lm_head"])
    loss = F.cross_entropy(logits.reshape(-1, c["vocab"]), targets.reshape(-1))
    return logits, loss


def to_bytes(t, dtype):
    return t.detach().to(dtype).contiguous().cpu().numpy().tobytes()


def write_safetensors(path, entries, metadata):
    """entries: list of (name, dtype string, shape, bytes)."""
    header = {"__metadata__": metadata}
    offset = 0
    for name, dt, shape, data in entries:
        header[name] = {"dtype": dt, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, data in entries:
            f.write(data)


def make(name, out_dir):
    c = CONFIGS[name]
    gen = torch.Generator().manual_seed(SEED)
    P = init_params(c, gen)
    B, T, V = c["B"], c["T"], c["vocab"]
    seq = torch.randint(0, V, (B, T + 1), generator=gen)
    idx, targets = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()

    entries = []
    for pname, shape in layout(c):
        entries.append((pname, "F32", shape, to_bytes(P[pname], torch.float32)))
    entries.append(("inputs", "I32", (B, T), to_bytes(idx, torch.int32)))
    entries.append(("targets", "I32", (B, T), to_bytes(targets, torch.int32)))

    names = [n for n, _ in layout(c)]
    decay = [P[n] for n in names if P[n].dim() == 2]
    no_decay = [P[n] for n in names if P[n].dim() != 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": ADAMW["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"],
        foreach=False)
    losses, norms = [], []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        logits, loss = forward(c, P, idx, targets)
        loss.backward()
        if step == 0:
            entries.append(("logits", "F32", (B, T, V), to_bytes(logits, torch.float32)))
            entries.append(("loss", "F64", (1,), to_bytes(loss.reshape(1), torch.float64)))
            for pname, shape in layout(c):
                entries.append(("grad." + pname, "F32", shape,
                                to_bytes(P[pname].grad, torch.float32)))
        norm = torch.nn.utils.clip_grad_norm_([P[n] for n in names], ADAMW["grad_clip"])
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    entries.append(("adamw.losses", "F64", (STEPS,),
                    to_bytes(torch.tensor(losses), torch.float64)))
    entries.append(("adamw.grad_norms", "F64", (STEPS,),
                    to_bytes(torch.tensor(norms), torch.float64)))

    meta = {"model": name, "B": str(B), "T": str(T), "steps": str(STEPS),
            "seed": str(SEED), "torch": torch.__version__}
    meta.update({k: repr(v) for k, v in ADAMW.items()})
    path = os.path.join(out_dir, name + ".safetensors")
    write_safetensors(path, entries, meta)
    print("%s: %d bytes, loss %.6f -> %.6f, grad norms %s" % (
        path, os.path.getsize(path), losses[0], losses[-1],
        " ".join("%.3f" % n for n in norms)))
    try:  # cross-check the writer with the reference reader when it is installed
        from safetensors.torch import load_file
        back = load_file(path)
        assert torch.equal(back["inputs"], idx.to(torch.int32))
        assert back["logits"].shape == (B, T, V)
        print("%s: safetensors.torch.load_file reads it back" % path)
    except ImportError:
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for the .safetensors files")
    ap.add_argument("--models", default=",".join(CONFIGS), help="comma-separated names")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(4)
    for name in args.models.split(","):
        make(name, args.out)


if __name__ == "__main__":
    main()
