#!/usr/bin/env python3
"""Prints docs/benchmarks.md's tables of the peer harness's sweeps
(markdown) from the CSVs that benches/figures.sh keeps in
docs/figures/data/:

  - wall time per event, timers off and on: min / **median** / max over
    the rounds, per peer and configuration (peers_time.raw.csv);
  - setup per fd: the median over every round and configuration, and the
    range of the per-configuration medians (peers_time.raw.csv);
  - instructions per event at one P and A (peers_instr.csv).

Usage: python3 benches/peer_tables.py [DATA_DIR] [P_INSTR] [A_INSTR]
(defaults: docs/figures/data 1000 100)
"""

import csv
import statistics
import sys
from collections import defaultdict

data = sys.argv[1] if len(sys.argv) > 1 else "docs/figures/data"
p_instr = sys.argv[2] if len(sys.argv) > 2 else "1000"
a_instr = sys.argv[3] if len(sys.argv) > 3 else "100"

rows = list(csv.DictReader(open(f"{data}/peers_time.raw.csv")))
peers = list(dict.fromkeys((r["impl"], r["backend"]) for r in rows))
# Baseline first, then epoll peers, then poll, then select, as the
# harness orders them within a backend.
order = {"none": 0, "epoll": 1, "epoll-oneshot": 2, "iouring": 3, "io_uring": 3, "poll": 4, "select": 5}
peers.sort(key=lambda p: (order.get(p[1], 9), p[0] != "evloop", p[0]))
configs = sorted(
    {(int(r["P"]), int(r["A"])) for r in rows},
    key=lambda c: (c[0], c[1]),
)

runs = defaultdict(list)
setup = defaultdict(list)
for r in rows:
    key = (r["impl"], r["backend"], int(r["P"]), int(r["A"]), r["timers"])
    runs[key].append(float(r["run_us_per_event"]) * 1000)
    if r["impl"] != "baseline":
        setup[(r["impl"], r["backend"])].append(float(r["setup_us_per_fd"]))
        setup[(r["impl"], r["backend"], key[2:])].append(float(r["setup_us_per_fd"]))


def cell(v):
    if not v:
        return "–"
    return f"{min(v):.0f} / **{statistics.median(v):.0f}** / {max(v):.0f}"


for timers, title in (("0", "Timers off"), ("1", "Timers on (a fresh random timeout per event)")):
    print(f"#### {title}: ns per event, min / **median** / max over the rounds\n")
    print("| peer | " + " | ".join(f"P={p} A={a}" for p, a in configs) + " |")
    print("|---|" + "---:|" * len(configs))
    for impl, backend in peers:
        cells = [cell(runs.get((impl, backend, p, a, timers))) for p, a in configs]
        if all(c == "–" for c in cells):
            continue
        print(f"| {impl} {backend} | " + " | ".join(cells) + " |")
    print()

print("#### Setup, µs per fd (median over every round and configuration; range of the per-configuration medians)\n")
print("| peer | median | range |")
print("|---|---:|---|")
for impl, backend in peers:
    if impl == "baseline":
        continue
    every = setup[(impl, backend)]
    per_config = [
        statistics.median(v)
        for k, v in setup.items()
        if len(k) == 3 and k[:2] == (impl, backend)
    ]
    print(f"| {impl} {backend} | {statistics.median(every):.2f} | {min(per_config):.2f}–{max(per_config):.2f} |")
print()

instr = [r for r in csv.DictReader(open(f"{data}/peers_instr.csv")) if r["P"] == p_instr and r["A"] == a_instr]
print(f"#### Instructions per event, P={p_instr} A={a_instr}\n")
print("| peer | plain | timers |")
print("|---|---:|---:|")
by = defaultdict(dict)
for r in instr:
    by[(r["impl"], r["backend"])][r["timers"]] = r["instr_per_event"]
for (impl, backend), v in sorted(by.items(), key=lambda kv: (order.get(kv[0][1], 9), kv[0][0] != "evloop", kv[0][0])):
    print(f"| {impl} {backend} | {v.get('0', '–')} | {v.get('1', '–')} |")
