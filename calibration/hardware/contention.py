#!/usr/bin/env python3
"""Contended over isolated median per kernel and size, as a Markdown table:

    python3 calibration/hardware/contention.py calibration/datasets/h100-2026-11-22
    python3 calibration/hardware/contention.py calibration/datasets/h200-2026-11-24 a ca

The two optional arguments name the isolated and the contended campaign (default c1 and
contended1)."""
import csv, gzip, statistics, sys
from collections import defaultdict
from pathlib import Path

root = Path(sys.argv[1])

def medians(path):
    t = defaultdict(lambda: defaultdict(list))
    with gzip.open(path, "rt") as f:
        for r in csv.DictReader(f):
            t[r["kernel"]][int(r["sms"])].append(int(r["time_ns"]))
    return {k: {m: statistics.median(v) for m, v in s.items()} for k, s in t.items()}

iso_dir, con_dir = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else ("c1", "contended1")
iso = medians(root / iso_dir / "samples-isolated.csv.gz")
con = medians(root / con_dir / "samples-contended.csv.gz")
sizes = sorted(next(iter(con.values())).keys())
print("| kernel | " + " | ".join(f"{m} SMs" for m in sizes) + " |")
print("|---|" + "---|" * len(sizes))
for k in sorted(con):
    print(f"| {k} | " + " | ".join(f"{con[k][m] / iso[k][m]:.2f}x" for m in sizes) + " |")
# The medians themselves at the smallest size, which admission.md quotes beside the table.
m = sizes[0]
ms = lambda d: [d[k][m] / 1e6 for k in sorted(con)]
print()
print(f"At {m} SMs the medians are {min(ms(con)):.0f} to {max(ms(con)):.0f} ms per launch contended"
      f" against {min(ms(iso)):.2f} to {max(ms(iso)):.1f} ms isolated.")
