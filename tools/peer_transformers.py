"""peer_transformers.py: the Offline shape on transformers' generate, for the same table
as `llmbench infer --random llama3.1-8b`: random Llama-3.1-8B weights in bf16 on the GPU,
BATCH prompts of PROMPT random token ids, 128 new tokens each (eos ignored), greedy.
One untimed warm-up generate (8 tokens), then one timed batch; prints samples/s.

usage: python3 tools/peer_transformers.py [BATCH] [PROMPT]"""
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    prompt = int(sys.argv[2]) if len(sys.argv) > 2 else 778
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                      max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                      tie_word_embeddings=False)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 128000, (batch, prompt), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(1))
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        model.generate(ids[:, :64], max_new_tokens=8, min_new_tokens=8, **kw)
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = model.generate(ids, max_new_tokens=128, min_new_tokens=128, **kw)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
    print(json.dumps({"peer": "transformers generate", "version": __import__("transformers").__version__,
                      "torch": torch.__version__, "batch": batch, "prompt": prompt,
                      "new_tokens": int(out.shape[1] - prompt), "seconds": round(dt, 3),
                      "samples_per_s": round(batch / dt, 3),
                      "output_tok_per_s": round(batch * 128 / dt, 1)}))


if __name__ == "__main__":
    main()
