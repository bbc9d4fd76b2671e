"""loadgen_lag_episodes.py DIR: when a load run sent late.

Reads DIR/llmbench_result.json (written by `llmbench load --out DIR`), finds the queries sent more
than 1 ms after their scheduled time and groups them into episodes (late queries less
than 5 ms of schedule apart), printing each episode's span, size, largest lag and the
number of queries in flight when it began (at the --max-inflight cap: the sender waited
for slots; well below it: the sender itself was late) and the longest latency among the
queries in flight then (about 200 ms or more: a lost packet's retransmission timeout).
Only reads; prints nothing else.
"""
import json, bisect, sys
d = json.load(open(sys.argv[1] + '/llmbench_result.json'))
S = d['series']
g = lambda k: (S[k]['values'] if isinstance(S[k], dict) else S[k])
sch, sent, done = g('scheduled_s'), g('sent_s'), g('done_s')
n = len(sch)
lag = [(sent[i] - sch[i]) * 1e3 for i in range(n)]
bad = [i for i in range(n) if lag[i] > 1.0]
eps = []
for i in bad:
    if eps and sch[i] - eps[-1][1] < 0.005:
        eps[-1][1] = sch[i]; eps[-1][2] += 1; eps[-1][3] = max(eps[-1][3], lag[i])
    else:
        eps.append([sch[i], sch[i], 1, lag[i]])
ss, dd = sorted(sent), sorted(done)
print('%s: %d queries, %d late by > 1 ms (%.2f%%), %d episodes' % (sys.argv[1], n, len(bad), 100.0 * len(bad) / n, len(eps)))
for e in eps[:12]:
    t = e[0]
    infl = bisect.bisect_right(ss, t) - bisect.bisect_right(dd, t)
    slow = max([done[i] - sent[i] for i in range(n) if sent[i] <= t < done[i]] or [0.0])
    print('  episode %.4f-%.4f s: %d queries, max lag %.2f ms, in flight at start %d, longest of them %.1f ms' % (e[0], e[1], e[2], e[3], infl, slow * 1e3))
