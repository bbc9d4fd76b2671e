#!/usr/bin/env python3
"""gap_summary.py FILE.sqlite STEPS [TOP]: from an Nsight Systems capture of STEPS timed steps of
`llmbench train` (bench/step_gaps.sh), how a step's wall time splits into kernel time and
the idle time between consecutive kernels, which kernel pairs leave the largest gaps, and
where a step's kernel time goes, kernel by kernel name (as timed under the clock the GPU
held in those steps, unlike Nsight Compute's kernels run alone).
Steps are queued back to back, so each is an equal share of the captured kernels. A capture
of several GPUs (train --gpus N) is read for the lowest device only; NCCL's kernels, which
run beside the step on their own stream, are left out of the steps and summed apart."""
import re
import sqlite3
import sys
from collections import defaultdict

db = sqlite3.connect(sys.argv[1])
names = dict(db.execute("SELECT id, value FROM StringIds"))
every = db.execute("SELECT start, end, shortName, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                   "ORDER BY start").fetchall()
if not every:
    sys.exit("no kernels in the capture")
device = min(r[3] for r in every)
mine = [r[:3] for r in every if r[3] == device]
nccl = [r for r in mine if "nccl" in names.get(r[2], "").lower()]
rows = [r for r in mine if "nccl" not in names.get(r[2], "").lower()]
if len({r[3] for r in every}) > 1 or nccl:
    print(f"device {device} of {len({r[3] for r in every})}: {len(rows)} step kernels, {len(nccl)} NCCL "
          f"kernels, {sum(b - a for a, b, _ in nccl) / 1e6 / int(sys.argv[2]):.3f} ms of NCCL a step")


def short(i):
    return re.sub(r"[<(].*", "", names.get(i, "?"))[:48]


n_steps = int(sys.argv[2])
per = len(rows) // n_steps
if per * n_steps != len(rows):
    print(f"warning: {len(rows)} kernels are not {n_steps} equal steps")
steps = [rows[i * per:(i + 1) * per] for i in range(n_steps)]
pairs = defaultdict(lambda: [0.0, 0])
hist = defaultdict(int)
print(f"{'step':>4} {'kernels':>7} {'span ms':>8} {'busy ms':>8} {'gaps ms':>8} {'gap %':>6}")
for n, s in enumerate(steps):
    span = (s[-1][1] - s[0][0]) / 1e6
    busy, gaps, end = 0.0, 0.0, s[0][0]
    for a, b in zip(s, s[1:]):
        g = max(0, b[0] - max(end, a[1]))
        end = max(end, a[1])
        gaps += g / 1e6
        key = f"{short(a[2])} -> {short(b[2])}"
        pairs[key][0] += g / 1e3
        pairs[key][1] += 1
        hist[min(g // 1000, 10)] += 1
    busy = span - gaps
    print(f"{n:>4} {len(s):>7} {span:8.3f} {busy:8.3f} {gaps:8.3f} {100 * gaps / span:6.2f}")
span_all = (rows[-1][1] - rows[0][0]) / 1e6
between = sum(max(0, b[0][0] - a[-1][1]) for a, b in zip(steps, steps[1:])) / 1e6
print(f"all {n_steps} steps: span {span_all:.3f} ms, {span_all / n_steps:.3f} ms a step; "
      f"between steps (input copies, events) {between:.3f} ms in all")
print("gap sizes (us: count): " + ", ".join(f"{'>=' if k == 10 else ''}{k}-{k + 1}: {v}" for k, v in sorted(hist.items())))
print("largest gaps summed over all steps (us, count, pair):")
for k, (us, c) in sorted(pairs.items(), key=lambda kv: -kv[1][0])[:12]:
    print(f"{us:9.1f} {c:5d}  {k}")
top = int(sys.argv[3]) if len(sys.argv) > 3 else 30
by_name = defaultdict(lambda: [0.0, 0])
for a in rows:
    entry = by_name[names.get(a[2], "?")]
    entry[0] += (a[1] - a[0]) / 1e3
    entry[1] += 1
kernel_ms = sum(v[0] for v in by_name.values()) / n_steps / 1e3
print(f"kernel time a step by name ({kernel_ms:.3f} ms in all; ms a step, launches a step, us a launch):")
for k, (us, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]:
    print(f"{us / n_steps / 1e3:8.3f} {c / n_steps:6.1f} {us / c:9.1f}  {k[:110]}")
