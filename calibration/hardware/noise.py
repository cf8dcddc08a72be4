#!/usr/bin/env python3
"""Noise per kernel and size of a recorded sweep, as a Markdown table:

    python3 calibration/hardware/noise.py calibration/datasets/h100-2026-11-22/c1

Per kernel: the median at 8, 64 and 132 SMs; over all 17 sizes, the widest body (90th percentile
over the median) and the largest launch over its size's median, in percent and in microseconds."""
import csv, gzip, statistics, sys
from collections import defaultdict
from pathlib import Path

src = Path(sys.argv[1])
times = defaultdict(lambda: defaultdict(list))
with gzip.open(src / "samples-isolated.csv.gz", "rt") as f:
    for r in csv.DictReader(f):
        times[r["kernel"]][int(r["sms"])].append(int(r["time_ns"]))

print("| kernel | median 8 SMs (µs) | median 64 | median 132 | widest p90/median | largest max/median | largest excess (µs) |")
print("|---|---|---|---|---|---|---|")
for kernel, by_size in sorted(times.items()):
    med = {m: statistics.median(t) for m, t in by_size.items()}
    p90 = max(sorted(t)[int(0.9 * len(t))] / med[m] - 1 for m, t in by_size.items())
    top = max(max(t) / med[m] - 1 for m, t in by_size.items())
    excess = max(max(t) - med[m] for m, t in by_size.items())
    print(f"| {kernel} | {med[8]/1e3:,.1f} | {med[64]/1e3:,.1f} | {med[132]/1e3:,.1f} | "
          f"+{p90*100:.2f}% | +{top*100:.2f}% | {excess/1e3:.2f} |")
