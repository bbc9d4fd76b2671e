#!/usr/bin/env python3
"""bench_table.py OUTDIR SHAPE...: the table of bench/train_vs_pytorch.sh from its JSON
files (llmbench's `train --json` result, the PyTorch baseline's JSON line)."""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            text = f.read().strip()
        return json.loads(text.splitlines()[-1] if text.startswith("{\"impl\"") else text)
    except (OSError, ValueError, IndexError):
        return None


def metric(res, name):
    for m in (res or {}).get("metrics", []):
        if m["name"] == name:
            return m["value"]
    return None


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


out = sys.argv[1]
print("| shape | precision | llmbench tok/s | PyTorch tok/s | ratio | MFU | peak mem (GiB) | GPU util % | SM MHz (power-capped %) | step drift % | final loss (ours / torch) | attention fwd / bwd |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
for s in sys.argv[2:]:
    m, b, t, p, *mode = s.split(":")
    tag = f"{m}_{b}x{t}_{p}" + (f"_{mode[0]}" if mode else "")
    ours = load(os.path.join(out, f"llmbench_{tag}.json"))
    # the precision column says how fp32 products ran, from the run's own config
    fp32_mode = ((ours or {}).get("config") or {}).get("fp32_matmul", "ieee")
    if p == "fp32":
        p = {"auto": "fp32", "ieee": "fp32 (IEEE only)", "int8": "fp32 (int8 only)",
             "3xtf32": "fp32 (3xTF32)", "tf32": "fp32 (TF32)"}.get(fp32_mode, p)
    torch = load(os.path.join(out, f"torch_{tag}.json"))
    ot = metric(ours, "tokens_per_s")
    tt = torch.get("tokens_per_s") if torch else None
    ratio = ot / tt if ot and tt else None
    mem = metric(ours, "peak_device_bytes")
    tmem = torch.get("peak_mem_bytes") if torch else None
    memtxt = f"{fmt(mem and mem / 2**30, '.1f')} / {fmt(tmem and tmem / 2**30, '.1f')}"
    cfg = (ours or {}).get("config") or {}
    attn = f"{cfg.get('attention_forward', '-')} / {cfg.get('attention_backward', '-')}"
    clock = f"{fmt(metric(ours, 'sm_clock_mean_mhz'), '.0f')} ({fmt(metric(ours, 'clock_power_capped_pct'), '.0f')})"
    print(f"| {m} {b}x{t} | {p} | {fmt(ot, ',.0f')} | {fmt(tt, ',.0f')} | {fmt(ratio, '.2f')} | "
          f"{fmt(metric(ours, 'mfu'), '.3f')} | {memtxt} | {fmt(metric(ours, 'gpu_util_mean_pct'), '.0f')} | {clock} | "
          f"{fmt(metric(ours, 'step_ms_drift_pct'), '+.1f')} | "
          f"{fmt(metric(ours, 'final_loss'), '.3f')} / {fmt(torch and torch.get('final_loss'), '.3f')} | {attn} |")
