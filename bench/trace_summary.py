#!/usr/bin/env python3
"""trace_summary.py BASE_DIR RUN_DIR STEPS [TOP]: where a data-parallel step's extra time goes,
from bench/cupti_trace.c's traces of two `llmbench train` runs of STEPS timed steps each: BASE
(one GPU) and RUN (N GPUs, one trace file a rank). Each process is read inside its window
(cudaProfilerStart to cudaProfilerStop, the timed steps); its model stream is the stream with
the most kernels that are not NCCL's, and its steps are equal shares of that stream's kernels.

For each run (RUN: every rank, then the mean over ranks): the step period; the model stream's
busy time (kernels, copies, sets) and its idle time, split into the part while a kernel of
another stream ran (waiting for communication, or sharing the GPU with it), the part whose
next kernel was launched by the host only after the previous one ended (the host was late),
and the rest; NCCL's kernel time a step and the part of it while the model stream was idle
(exposed), and per rank NCCL's kernels a step, their mean time and blocks. Then, per kernel
name, the time a step in BASE and in RUN (rank mean) and the difference, largest first, with
how much of RUN's time ran beside an NCCL kernel, the per-launch time there against BASE's
mean, and the block counts RUN launched it with; and the host thread's runtime calls that
took the most time a step in each run."""
import glob
import os
import re
import sys
from collections import defaultdict


def load(path):
    k, api = [], []
    for line in open(path, errors="replace"):
        f = line.rstrip("\n").split("\t")
        if f[0] == "K" and len(f) >= 9:
            blocks = 1
            for g in f[6].split("x"):
                blocks *= int(g)
            k.append((int(f[3]), int(f[4]), int(f[1]), int(f[2]), int(f[5]), f[8], blocks))
        elif f[0] in ("M", "S") and len(f) >= 7:
            name = "[memcpy]" if f[0] == "M" else "[memset]"
            k.append((int(f[3]), int(f[4]), int(f[1]), int(f[2]), int(f[5]), name, 0))
        elif f[0] == "A" and len(f) >= 6:
            api.append((int(f[2]), int(f[3]), int(f[1]), int(f[4]), f[5]))
    return k, api


def window(api):
    start = [a for a in api if a[4].startswith("cudaProfilerStart")]
    stop = [a for a in api if a[4].startswith("cudaProfilerStop")]
    if not start or not stop:
        return None
    return start[0][1], stop[-1][0]


def union(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def overlap(a, b, u, lo=0):
    """Length of [a, b) inside the sorted disjoint intervals u (searching from index lo)."""
    t = 0
    for x, y in u[lo:]:
        if x >= b:
            break
        if y > a:
            t += min(b, y) - max(a, x)
    return t


def first_after(u, t):
    lo, hi = 0, len(u)
    while lo < hi:
        mid = (lo + hi) // 2
        if u[mid][1] <= t:
            lo = mid + 1
        else:
            hi = mid
    return lo


def is_nccl(name):
    return "nccl" in name.lower()


def short(name):
    s = re.sub(r"\(.*", "", name)
    s = re.sub(r"<.*", "", s)
    s = s.replace("void ", "")
    return s[:70]


def analyse(path, steps):
    recs, api = load(path)
    w = window(api)
    if w is None or not recs:
        return None
    lo, hi = w
    recs = [r for r in recs if r[0] >= lo and r[1] <= hi]
    if not recs:
        return None
    per_stream = defaultdict(int)
    for r in recs:
        if not is_nccl(r[5]) and not r[5].startswith("["):
            per_stream[r[3]] += 1
    model = max(per_stream, key=per_stream.get)
    mine = sorted(r for r in recs if r[3] == model)
    other = [r for r in recs if r[3] != model]
    nccl = [r for r in other if is_nccl(r[5])]
    u_other = union([(r[0], r[1]) for r in other])
    u_nccl = union([(r[0], r[1]) for r in nccl])
    launch = {a[3]: a for a in api}
    threads = defaultdict(int)
    for a in api:
        if lo <= a[0] <= hi:
            threads[a[2]] += 1
    host = max(threads, key=threads.get) if threads else None
    span = mine[-1][1] - mine[0][0]
    busy = sum(r[1] - r[0] for r in mine)
    idle_other = idle_late = idle_rest = 0
    for a, b in zip(mine, mine[1:]):
        g = b[0] - a[1]
        if g <= 0:
            continue
        side = overlap(a[1], b[0], u_other, first_after(u_other, a[1]))
        call = launch.get(b[4])
        late = 0
        if call is not None and call[4] not in ("cudaGraphLaunch_v10000",):
            late = min(g - side, max(0, call[1] - a[1]))
        idle_other += side
        idle_late += late
        idle_rest += g - side - late
    model_u = union([(r[0], r[1]) for r in mine])
    nccl_ns = sum(r[1] - r[0] for r in nccl)
    nccl_exposed = sum((b - a) - overlap(a, b, model_u, first_after(model_u, a)) for a, b in u_nccl)
    by_name = defaultdict(lambda: [0, 0, 0, 0, set()])  # ns, launches, beside NCCL: ns, launches; blocks
    for r in mine:
        d = r[1] - r[0]
        e = by_name[short(r[5])]
        e[0] += d
        e[1] += 1
        e[4].add(r[6])
        if u_nccl and overlap(r[0], r[1], u_nccl, first_after(u_nccl, r[0])) > d / 2:
            e[2] += d
            e[3] += 1
    api_ms = defaultdict(float)
    for a in api:
        if a[2] == host and lo <= a[0] and a[1] <= hi:
            api_ms[a[4]] += (a[1] - a[0]) / 1e6
    dev = mine[0][2]
    ms = lambda ns: ns / 1e6 / steps
    blocks = sorted({r[6] for r in nccl})
    return {
        "file": os.path.basename(path), "device": dev, "period": ms(span), "busy": ms(busy),
        "idle": ms(span - busy), "idle_other": ms(idle_other), "idle_late": ms(idle_late),
        "idle_rest": ms(idle_rest), "nccl": ms(nccl_ns), "nccl_exposed": ms(nccl_exposed),
        "kernels": len(mine) / steps, "nccl_kernels": len(nccl) / steps, "by_name": by_name,
        "nccl_us": nccl_ns / max(1, len(nccl)) / 1e3, "nccl_blocks": blocks,
        "api": {k: v / steps for k, v in api_ms.items()},
    }


def runs(d, steps):
    out = [analyse(p, steps) for p in sorted(glob.glob(os.path.join(d, "cupti.*.tsv")))]
    return sorted((r for r in out if r is not None), key=lambda r: r["device"])


def main():
    base_dir, run_dir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 25
    base, run = runs(base_dir, steps), runs(run_dir, steps)
    if not base or not run:
        sys.exit(f"no traced window in {base_dir if not base else run_dir}")
    cols = ["period", "busy", "idle", "idle_other", "idle_late", "idle_rest", "nccl", "nccl_exposed"]
    print(f"ms a step ({steps} steps); idle split: beside another stream's kernel / host launched late / rest")
    print(f"{'run':>12} {'dev':>3} {'kern':>6} " + " ".join(f"{c:>12}" for c in cols))
    rows = [("base", r) for r in base] + [("run", r) for r in run]
    for tag, r in rows:
        print(f"{tag:>12} {r['device']:>3} {r['kernels']:>6.0f} " + " ".join(f"{r[c]:>12.3f}" for c in cols))
    mean = {c: sum(r[c] for r in run) / len(run) for c in cols}
    b0 = base[0]
    print(f"{'run mean':>12} {'':>3} {'':>6} " + " ".join(f"{mean[c]:>12.3f}" for c in cols))
    print(f"{'run - base':>12} {'':>3} {'':>6} " + " ".join(f"{mean[c] - b0[c]:>12.3f}" for c in cols))
    for r in run:
        print(f"device {r['device']}: {r['nccl_kernels']:.1f} NCCL kernels a step, {r['nccl_us']:.1f} us each on"
              f" average, blocks {'/'.join(map(str, r['nccl_blocks']))}")
    names = set(b0["by_name"]) | set().union(*(r["by_name"] for r in run))
    table = []
    for n in names:
        b = b0["by_name"].get(n, [0, 0, 0, 0, set()])
        rs = [r["by_name"].get(n, [0, 0, 0, 0, set()]) for r in run]
        grids = "/".join(map(str, sorted(set().union(*(x[4] for x in rs)))[:3]))
        t_run = sum(x[0] for x in rs) / len(rs) / 1e6 / steps
        t_base = b[0] / 1e6 / steps
        beside = sum(x[2] for x in rs) / len(rs) / 1e6 / steps
        n_beside = sum(x[3] for x in rs) / len(rs) / steps
        base_per = b[0] / b[1] / 1e3 if b[1] else float("nan")
        run_beside_per = sum(x[2] for x in rs) / max(1, sum(x[3] for x in rs)) / 1e3
        launches = sum(x[1] for x in rs) / len(rs) / steps
        table.append((t_run - t_base, n, t_base, t_run, launches, b[1] / steps, beside, n_beside,
                      base_per, run_beside_per, grids))
    table.sort(key=lambda x: (-abs(x[0]), -x[3]))
    print(f"\nper kernel name, ms a step (run: mean over ranks), by |difference| (then the run's time: with"
          f" RUN_DIR = BASE_DIR, a one-GPU step's kernels by time); beside NCCL: the run's time"
          f" while an NCCL kernel ran, us a launch there against base's mean")
    print(f"{'diff':>7} {'base':>7} {'run':>7} {'n base':>6} {'n run':>6} {'beside':>7} {'n bes.':>6}"
          f" {'us base':>8} {'us bes.':>8} {'blocks':>11}  name (blocks: the run's launches)")
    for d, n, tb, tr, lr, lb, bs, nb, bp, rp, gr in table[:top]:
        print(f"{d:>7.3f} {tb:>7.3f} {tr:>7.3f} {lb:>6.1f} {lr:>6.1f} {bs:>7.3f} {nb:>6.1f} {bp:>8.1f}"
              f" {rp if nb else float('nan'):>8.1f} {gr:>11}  {n}")
    slow = sum(x[6] - x[7] * x[8] / 1e3 for x in table if x[7] and x[8] == x[8])
    print(f"kernels beside NCCL took {slow:.3f} ms a step more than base's mean for the same launches")
    print("\nhost thread's runtime calls, ms a step (base | run rank of the first device)")
    keys = sorted(set(b0["api"]) | set(run[0]["api"]), key=lambda k: -(run[0]["api"].get(k, 0) + b0["api"].get(k, 0)))
    for k in keys[:12]:
        print(f"{b0['api'].get(k, 0):>8.3f} {run[0]['api'].get(k, 0):>8.3f}  {k}")


if __name__ == "__main__":
    main()
