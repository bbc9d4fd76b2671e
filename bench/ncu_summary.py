#!/usr/bin/env python3
"""ncu_summary.py FILE.csv: per-kernel time of an `ncu --csv --metrics
gpu__time_duration.sum` capture, grouped by kernel name (template arguments dropped),
largest first, with the share of the total. For finding where a training step goes."""
import csv
import re
import sys
from collections import defaultdict

rows = list(csv.reader(line for line in open(sys.argv[1]) if line.startswith('"')))
head = rows[0]
ki, vi, ui = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
tot = defaultdict(float)
cnt = defaultdict(int)
scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "ns": 1e-6, "us": 1e-3, "ms": 1.0}
for r in rows[1:]:
    name = re.sub(r"<.*", "", r[ki]).strip()
    name = re.sub(r"\(.*", "", name)[:60]
    tot[name] += float(r[vi].replace(",", "")) * scale.get(r[ui], 1e-6)
    cnt[name] += 1
all_ms = sum(tot.values())
print(f"total {all_ms:.2f} ms over {sum(cnt.values())} kernels")
for name, ms in sorted(tot.items(), key=lambda kv: -kv[1])[:25]:
    print(f"{ms:9.3f} ms {100 * ms / all_ms:5.1f}% {cnt[name]:5d}x  {name}")
