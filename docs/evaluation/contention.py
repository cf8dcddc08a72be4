#!/usr/bin/env python3
"""Median contended / median isolated launch time per kernel and size on the H100 datasets:
how much slower a kernel runs with a memory-bandwidth stressor on the other SMs.

Usage: python3 docs/evaluation/contention.py [DATASET_DIR]
(default calibration/datasets/h100-2026-11-22; reads c1/samples-isolated.csv.gz and
contended1/samples-contended.csv.gz)."""
import csv, gzip, statistics, sys
from collections import defaultdict
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else "calibration/datasets/h100-2026-11-22")

def medians(path):
    times = defaultdict(list)
    with gzip.open(path, "rt") as f:
        for row in csv.DictReader(f):
            times[(row["kernel"], int(row["sms"]))].append(int(row["time_ns"]))
    return {k: statistics.median(v) for k, v in times.items()}

isolated = medians(root / "c1/samples-isolated.csv.gz")
contended = medians(root / "contended1/samples-contended.csv.gz")
sizes = sorted({m for _, m in contended})
print("kernel    " + "".join(f"{m:>9}" for m in sizes))
for kernel in sorted({k for k, _ in contended}):
    ratios = [contended[(kernel, m)] / isolated[(kernel, m)] for m in sizes]
    print(f"{kernel:<10}" + "".join(f"{r:>8.2f}x" for r in ratios))
print("\nmedian ms per launch, isolated / contended")
print("kernel    " + "".join(f"{m:>16}" for m in sizes))
for kernel in sorted({k for k, _ in contended}):
    cells = [f"{isolated[(kernel, m)] / 1e6:.2f}/{contended[(kernel, m)] / 1e6:.2f}" for m in sizes]
    print(f"{kernel:<10}" + "".join(f"{c:>16}" for c in cells))
