#!/usr/bin/env python3
"""Samples of `perf script -F comm,pid,tid,time,ip,sym,dso` (stdin) in bins
of BIN ms from START for SPAN ms (seconds of perf's clock, argv: START
[SPAN=300] [BIN=5]): per bin, the samples of each thread that took any
(postgres processes by pid, pool threads as pid/pool), then the top
symbols of each thread over the span. At 1999 Hz a busy thread gives
about 10 samples in 5 ms."""
import collections, re, sys

start = float(sys.argv[1]); span = float(sys.argv[2]) if len(sys.argv) > 2 else 300; width = float(sys.argv[3]) if len(sys.argv) > 3 else 5
bins = collections.defaultdict(collections.Counter)
syms = collections.defaultdict(collections.Counter)
for line in sys.stdin:
    m = re.match(r'\s*(\S+)\s+(\d+)/(\d+)\s+([\d.]+):\s+\S+\s+(.*)', line)
    if not m or m.group(1) == 'swapper':
        continue
    comm, pid, tid, t, sym = m.groups()
    ms = (float(t) - start) * 1000
    if not 0 <= ms < span:
        continue
    who = f'{pid}' if pid == tid else f'{pid}/pool' if comm.startswith('gpuindex-cpu') else f'{pid}/{comm}'
    bins[int(ms // width)][who] += 1
    syms[who][re.sub(r'\+0x[0-9a-f]+', '', sym)[:100]] += 1
for b in sorted(bins):
    print(f'{b * width:6.0f} ms', ' '.join(f'{k}:{v}' for k, v in sorted(bins[b].items())))
for who, c in sorted(syms.items(), key=lambda x: -sum(x[1].values()))[:8]:
    print(f'\n{who} ({sum(c.values())} samples)')
    for s, n in c.most_common(10):
        print(f'  {n:5d} {s}')
