#!/usr/bin/env python3
"""Reports 3 and 4 of docs/evaluation/preregistration-h200.md: predictions of the real H200's
medians (campaign `a`) from the simulator's h200 profile, from `wcetctl predict --device h200`, and
from the H100's measured medians. Run from the repository root after

    wcetctl campaign --backend sim --sim-profile h200 --launches 200 --seed 1 --delay-probe 0 --out /tmp/simh200
    for k in backprop bfs gaussian hotspot lud needle srad tmatch; do
        wcetctl --json predict $k --device h200 --sizes 8,16,24,32,40,48,56,64,72,80,88,96,104,112,120,128,132 > /tmp/pred-$k.json
    done
    python3 docs/evaluation/h200-prediction.py /tmp/simh200 /tmp

Further directories of `pred-KERNEL.json` files, each after a label (`LABEL=DIR`), add a row each
and a table per kernel (docs/evaluation/preregistration-ptx-prediction.md):

    python3 docs/evaluation/h200-prediction.py /tmp/simh200 /tmp "PTX=/tmp/pred-ptx"
"""
import csv, gzip, json, statistics, sys
from collections import defaultdict

KERNELS = ["backprop", "bfs", "gaussian", "hotspot", "lud", "needle", "srad", "tmatch"]


def medians(path):
    opener = gzip.open if path.endswith(".gz") else open
    t = defaultdict(list)
    with opener(path, "rt") as f:
        for r in csv.DictReader(f):
            t[(r["kernel"], int(r["sms"]))].append(int(r["time_ns"]))
    return {k: statistics.median(v) for k, v in t.items()}


real = medians("calibration/datasets/h200-2026-11-24/a/samples-isolated.csv.gz")
h100 = medians("calibration/datasets/h100-2026-11-22/c1/samples-isolated.csv.gz")
sim = medians(sys.argv[1] + "/samples-isolated.csv")


def predictions(directory):
    pred = {}
    for k in KERNELS:
        with open(f"{directory}/pred-{k}.json") as f:
            for m, t in json.load(f)["predicted_typical_ns"]:
                pred[(k, m)] = t
    return pred


pred = predictions(sys.argv[2])
more = [(arg.split("=", 1)[0], predictions(arg.split("=", 1)[1])) for arg in sys.argv[3:]]

print("| prediction | MAPE | median predicted/true | within 10 / 25 / 50% |")
print("|---|---|---|---|")


def row(name, p, keys):
    ratios = [p[k] / real[k] for k in keys]
    ape = [abs(r - 1) * 100 for r in ratios]
    within = "/".join(f"{round(100 * sum(a <= t for a in ape) / len(ape))}" for t in (10, 25, 50))
    print(f"| {name} | {statistics.mean(ape):.1f}% | {statistics.median(ratios):.3f} | {within}% |")


rows = [("simulator h200", sim), ("wcetctl predict --device h200", pred), ("H100 c1", h100)] + more
for name, p in rows:
    row(name, p, list(real))
for name, p in [("wcetctl predict --device h200", pred)] + more:
    print(f"\nPer kernel, {name}:\n")
    print("| kernel | MAPE | median predicted/true | within 10 / 25 / 50% |")
    print("|---|---|---|---|")
    for kernel in KERNELS:
        row(kernel, p, [key for key in real if key[0] == kernel])
print()
print("H200 median at 8 SMs over the H100's, per kernel:",
      ", ".join(f"{k} {100 * (real[(k, 8)] / h100[(k, 8)] - 1):+.1f}%" for k in KERNELS))
