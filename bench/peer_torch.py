"""peer_torch.py: the PyTorch peers of `llmbench infer --random llama3.1-8b` on the MLPerf
Offline shape, in one process over one model: random Llama-3.1-8B weights in bf16 on the
GPU, prompts of PROMPT random token ids, 128 new tokens each, greedy, eos ignored.

- transformers' generate: BATCH_HF prompts in one call (Offline samples/s), then one
  prompt alone (TTFT from a 1-token generate, TPOT from the 128-token one).
- static: a loop of this file over the same weights (q/k/v and gate/up fused into one
  product each): a static KV cache [B, kv heads, PROMPT + 128, head size] per layer;
  prefill in micro-batches of 16 prompts, eager, with causal SDPA; each decode step is one
  CUDA graph of the compiled layer (torch.compile, default mode) x 32, the head and the
  argmax; BATCH_STATIC prompts, then one alone (TTFT, TPOT).
Each timing follows an untimed warm-up of the same code. Prints one JSON line a
measurement.

usage: python3 bench/peer_torch.py [--batch-hf 64] [--batch-static 128] [--prompt 778]
       [--only hf|static]"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

NEW = 128
MICRO = 16


THETA = 500000.0
EPS = 1e-5
ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}


def config():
    return LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                       max_position_embeddings=131072, rms_norm_eps=EPS, rope_theta=THETA,
                       rope_scaling=ROPE, tie_word_embeddings=False)


def emit(**kw):
    print(json.dumps(kw), flush=True)


def sync_time():
    torch.cuda.synchronize()
    return time.perf_counter()


def run_hf(model, ids, batch, prompt):
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
    model.generate(ids[:8, :64], max_new_tokens=8, min_new_tokens=8, **kw)
    t = sync_time()
    out = model.generate(ids[:batch], max_new_tokens=NEW, min_new_tokens=NEW, **kw)
    dt = sync_time() - t
    emit(peer="transformers generate", batch=batch, prompt=prompt,
         new_tokens=int(out.shape[1] - prompt), seconds=round(dt, 3),
         samples_per_s=round(batch / dt, 3), output_tok_per_s=round(batch * NEW / dt, 1))
    t = sync_time()
    model.generate(ids[:1], max_new_tokens=1, min_new_tokens=1, **kw)
    ttft = sync_time() - t
    t = sync_time()
    model.generate(ids[:1], max_new_tokens=NEW, min_new_tokens=NEW, **kw)
    whole = sync_time() - t
    emit(peer="transformers generate", batch=1, prompt=prompt, ttft_ms=round(ttft * 1e3, 2),
         tpot_ms=round((whole - ttft) / (NEW - 1) * 1e3, 3))


def rms(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rotate(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), -1) * sin


def llama3_inv_freq(cfg):
    """RoPE frequencies with llama3 scaling (the formula of Meta's reference code)."""
    r = ROPE
    hd = cfg.hidden_size // cfg.num_attention_heads
    inv = 1.0 / THETA ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    old = r["original_max_position_embeddings"]
    low, high = old / r["low_freq_factor"], old / r["high_freq_factor"]
    wave = 2 * torch.pi / inv
    smooth = (old / wave - r["low_freq_factor"]) / (r["high_freq_factor"] - r["low_freq_factor"])
    mid = (1 - smooth) * inv / r["factor"] + smooth * inv
    return torch.where(wave > low, inv / r["factor"], torch.where(wave < high, inv, mid))


class Static:
    """The model over the transformers model's tensors, with a static cache per batch size."""

    def __init__(self, hf, cfg, batches, t_max):
        m = hf.model
        self.t_max = t_max
        self.nh, self.nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.hd = cfg.hidden_size // self.nh
        self.layers = []
        for layer in m.layers:
            a, f = layer.self_attn, layer.mlp
            self.layers.append((layer.input_layernorm.weight,
                                torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
                                a.o_proj.weight, layer.post_attention_layernorm.weight,
                                torch.cat([f.gate_proj.weight, f.up_proj.weight]),
                                f.down_proj.weight))
        self.emb, self.norm, self.head = m.embed_tokens.weight, m.norm.weight, hf.lm_head.weight
        self.cache = {}
        for b in batches:
            shape = (b, self.nkv, t_max, self.hd)
            self.cache[b] = ([torch.zeros(shape) for _ in self.layers],
                             [torch.zeros(shape) for _ in self.layers])
        inv = llama3_inv_freq(cfg)
        ang = torch.outer(torch.arange(t_max, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), -1)
        self.cos, self.sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
        self.causal = torch.ones(t_max, t_max, dtype=torch.bool).tril()
        self.block = torch.compile(self.decode_block)

    def qkv(self, x, w, pos):
        b, t, _ = x.shape
        q, k, v = (x @ w.T).split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], -1)
        q = q.view(b, t, self.nh, self.hd).transpose(1, 2)
        k = k.view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = v.view(b, t, self.nkv, self.hd).transpose(1, 2)
        cos, sin = self.cos[pos], self.sin[pos]
        return rotate(q, cos, sin), rotate(k, cos, sin), v

    def mlp(self, x, n2, w13, w2):
        g, u = (rms(x, n2, EPS) @ w13.T).chunk(2, -1)
        return x + (F.silu(g) * u) @ w2.T

    def decode_block(self, x, n1, wqkv, wo, n2, w13, w2, kc, vc, pos):
        """One layer for one new token a sequence at position pos (a [1] tensor)."""
        b = x.shape[0]
        q, k, v = self.qkv(rms(x, n1, EPS), wqkv, pos)
        kc[:, :, pos] = k
        vc[:, :, pos] = v
        g = self.nh // self.nkv
        q = q.reshape(b, self.nkv, g, self.hd)
        s = (q @ kc.transpose(-1, -2)).float() * self.hd ** -0.5
        s = s.masked_fill(~self.causal[pos].view(1, 1, 1, -1), float("-inf"))
        o = (s.softmax(-1).to(x.dtype) @ vc).reshape(b, 1, self.nh * self.hd)
        return self.mlp(x + o @ wo.T, n2, w13, w2)

    def prefill(self, ids, rows, batch):
        """The prompts ids [m, T] into rows [rows, rows + m) of the batch's cache; the next
        token of each."""
        m, t = ids.shape
        kc, vc = self.cache[batch]
        pos = torch.arange(t, device=ids.device)
        x = self.emb[ids]
        for i, (n1, wqkv, wo, n2, w13, w2) in enumerate(self.layers):
            q, k, v = self.qkv(rms(x, n1, EPS), wqkv, pos)
            kc[i][rows:rows + m, :, :t] = k
            vc[i][rows:rows + m, :, :t] = v
            g = self.nh // self.nkv
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1),
                                               v.repeat_interleave(g, 1), is_causal=True)
            x = self.mlp(x + o.transpose(1, 2).reshape(m, t, -1) @ wo.T, n2, w13, w2)
        return (rms(x[:, -1], self.norm, EPS) @ self.head.T).argmax(-1)

    def decode_step(self, tok, pos, batch):
        x = self.emb[tok].view(batch, 1, -1)
        kc, vc = self.cache[batch]
        for i, w in enumerate(self.layers):
            x = self.block(x, *w, kc[i], vc[i], pos)
        return (rms(x[:, 0], self.norm, EPS) @ self.head.T).argmax(-1)

    def graph(self, batch, prompt):
        """A CUDA graph of one decode step of `batch` rows; its static input and output."""
        tok = torch.zeros(batch, dtype=torch.long)
        pos = torch.full((1,), prompt, dtype=torch.long)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.decode_step(tok, pos, batch)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = self.decode_step(tok, pos, batch)
        return g, tok, pos, out

    def generate(self, ids, graph):
        """NEW tokens for each prompt of ids [B, T] (B the graph's rows); returns seconds to
        the first token and in all."""
        g, tok, pos, out = graph
        b, t = ids.shape
        t0 = sync_time()
        first = torch.cat([self.prefill(ids[r:r + MICRO], r, b) for r in range(0, b, MICRO)])
        ttft = sync_time() - t0
        tok.copy_(first)
        for i in range(NEW - 1):
            pos.fill_(t + i)
            g.replay()
            tok.copy_(out)
        return ttft, sync_time() - t0


def run_static(model, cfg, ids, batch, prompt):
    st = Static(model, cfg, (batch, 1), prompt + NEW)
    t = time.perf_counter()
    big, one = st.graph(batch, prompt), st.graph(1, prompt)
    compile_s = time.perf_counter() - t
    st.generate(ids[:batch], big)  # warm-up
    _, dt = st.generate(ids[:batch], big)
    emit(peer="static cache + torch.compile", batch=batch, prompt=prompt, seconds=round(dt, 3),
         samples_per_s=round(batch / dt, 3), output_tok_per_s=round(batch * NEW / dt, 1),
         compile_and_capture_s=round(compile_s, 1))
    st.generate(ids[:1], one)
    ttft, whole = st.generate(ids[:1], one)
    emit(peer="static cache + torch.compile", batch=1, prompt=prompt,
         ttft_ms=round(ttft * 1e3, 2), tpot_ms=round((whole - ttft) / (NEW - 1) * 1e3, 3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-hf", type=int, default=64)
    ap.add_argument("--batch-static", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=778)
    ap.add_argument("--only", choices=["hf", "static"])
    a = ap.parse_args()
    cfg = config()
    torch.set_default_dtype(torch.bfloat16)
    torch.set_default_device("cuda")
    torch.manual_seed(1)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 128000, (max(a.batch_hf, a.batch_static), a.prompt))
    import transformers
    emit(torch=torch.__version__, transformers=transformers.__version__,
         device=torch.cuda.get_device_name())
    with torch.no_grad():
        if a.only in (None, "static"):
            run_static(model, cfg, ids, a.batch_static, a.prompt)
        if a.only in (None, "hf"):
            torch.cuda.empty_cache()
            run_hf(model, ids, a.batch_hf, a.prompt)


if __name__ == "__main__":
    main()
