"""hf_engine_check.py: llmbench's engine against Hugging Face transformers on one tiny
random Llama (GQA, llama3 RoPE scaling, head size 64) saved by transformers as a model
directory (config.json, model.safetensors, a byte-level tokenizer.json).

fp32 weights: the CPU engine's logits against transformers' fp32 logits (max abs error),
and 32 greedy tokens, which must be equal. bf16 weights: the GPU engine's logits against
transformers' bf16 logits on the GPU (relative L2), and the greedy tokens up to the first
step whose top two logits (transformers') lie within bf16 rounding of each other.

usage: python3 tools/hf_engine_check.py ENGINE_LOGITS_BINARY WORKDIR [--gpu]
Prints one JSON line per check and exits 1 when a check fails."""
import json
import os
import subprocess
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_alphabet():
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, k = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + k)
            k += 1
    return out


def write_tokenizer(d):
    alpha = byte_alphabet()
    vocab = {alpha[b]: b for b in range(256)}
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>"]
    tok = {"version": "1.0",
           "added_tokens": [{"id": 310 + i, "content": s, "special": True} for i, s in enumerate(specials)],
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
           "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "byte_fallback": False, "vocab": vocab, "merges": []}}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f)


def engine(binary, d, device, n_gen, ids):
    out = subprocess.run([binary, d, device, str(n_gen)] + [str(i) for i in ids], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    binary, work, gpu = sys.argv[1], sys.argv[2], "--gpu" in sys.argv
    cfg = LlamaConfig(vocab_size=320, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      rms_norm_eps=1e-5, rope_theta=10000.0,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
                      tie_word_embeddings=False, bos_token_id=310, eos_token_id=311)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():  # larger weights than the init's, so greedy choices are clear
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(6.0)
    ids = [310] + [int(x) for x in torch.randint(0, 300, (20,), generator=torch.Generator().manual_seed(1))]
    n_gen = 32
    failed = False
    for dtype, device in [(torch.float32, "cpu")] + ([(torch.bfloat16, "gpu")] if gpu else []):
        d = os.path.join(work, "tiny-" + str(dtype).split(".")[1])
        os.makedirs(d, exist_ok=True)
        m = model.to(dtype)
        m.save_pretrained(d, safe_serialization=True)
        write_tokenizer(d)
        dev = "cuda" if device == "gpu" else "cpu"
        m = m.to(dev)
        with torch.no_grad():
            ref = m(torch.tensor([ids], device=dev)).logits[0].float().cpu()
            gen = m.generate(torch.tensor([ids], device=dev), max_new_tokens=n_gen, do_sample=False,
                             min_new_tokens=n_gen, pad_token_id=0)[0, len(ids):].tolist()
            full = m(torch.tensor([ids + gen], device=dev)).logits[0].float().cpu()
        got = engine(binary, d, device, n_gen, ids)
        lg = torch.tensor(got["logits"])
        max_abs = (lg - ref).abs().max().item()
        rel_l2 = ((lg - ref).norm() / ref.norm()).item()
        # greedy: equal up to the first near-tie of transformers' top two logits
        tie = 0.0 if dtype == torch.float32 else 2 * 2 ** -8 * full.abs().max().item()
        agree, n_checked = 0, 0
        for k in range(n_gen):
            top2 = full[len(ids) - 1 + k].topk(2).values
            if dtype != torch.float32 and (top2[0] - top2[1]).item() <= tie:
                break
            n_checked += 1
            if got["greedy"][k] != gen[k]:
                break
            agree += 1
        ok = agree == n_checked and (max_abs <= 1e-3 if dtype == torch.float32 else rel_l2 <= 2e-2)
        if dtype == torch.float32:
            ok = ok and n_checked == n_gen
        failed |= not ok
        print(json.dumps({"check": "transformers-" + device + "-" + str(dtype).split(".")[1],
                          "logits_max_abs": max_abs, "logits_rel_l2": rel_l2,
                          "greedy_equal": agree, "greedy_checked": n_checked, "pass": ok}))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
