#!/usr/bin/env python3
"""Write a simulator profile from a recorded hardware sweep, so later changes can be tested
against real curves without a GPU:

    python3 calibration/hardware/make-profile.py calibration/datasets/h100-2026-11-22/c1 \
        > calibration/profiles/h100-measured.toml

Per kernel: `curve_ns` from the median at every size; `body_sigma` from the spread of the body
(the 10th-90th percentile range over the median, as a half-normal's sigma); no kernel tail of its
own. Per device: the rare delays (`[delays]`), from the launches of the short kernels (the median
below 200 us, where a fixed delay stands out of the multiplicative jitter) that ran more than
2 us over their size's median."""
import csv, gzip, json, statistics, sys
from collections import defaultdict
from pathlib import Path

src = Path(sys.argv[1])
stamp = json.loads((src / "stamp.json").read_text())
geometry = {r["kernel"]: r for r in csv.DictReader(open(src / "geometry.csv"))}
times = defaultdict(lambda: defaultdict(list))
throttled = 0
with gzip.open(src / "samples-isolated.csv.gz", "rt") as f:
    for r in csv.DictReader(f):
        times[r["kernel"]][int(r["sms"])].append(int(r["time_ns"]))
        throttled += r.get("throttled", "0") not in ("0", "", "false")

def q(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]

short, delayed, largest = 0, 0, 0.0
kernels = []
for kernel, by_size in sorted(times.items()):
    curve, sigmas = [], []
    for sms, t in sorted(by_size.items()):
        t = sorted(t)
        med = statistics.median(t)
        curve.append((sms, round(med)))
        sigmas.append((q(t, 0.9) - q(t, 0.1)) / med / 1.645)
        if med < 200_000:
            excess = [x - med for x in t]
            short += len(t)
            delayed += sum(1 for e in excess if e > 2000)
            largest = max(largest, max(excess))
    kernels.append((kernel, curve, statistics.median(sigmas)))

print(f"""# Measured on a real {stamp['gpu']} (driver {stamp['driver']}, CUDA {stamp['cuda']}, clocks
# {stamp['clock_policy']}, {stamp['sm_clock_mhz_min']}-{stamp['sm_clock_mhz_max']} MHz), {stamp['started_at'][:19]}Z:
# the medians of {stamp['launches_per_size']} isolated launches per kernel and size, written by
# calibration/hardware/make-profile.py from {sys.argv[1].rstrip('/')}. Isolated only:
# under a memory stressor the same kernels ran tens of times slower on small partitions, which
# the simulator's contention model does not reproduce (docs/hardware-validation.md).

name = "{stamp['gpu']}, measured curves (simulated)"
total_sms = {stamp['total_sms']}
sms_per_tpc = 2
partition_step_sms = 8
sm_clock_mhz = {stamp['sm_clock_mhz_max']}

# {throttled} launches of this campaign ran in a throttled batch (NVML violation counters and
# clock reasons); the profile throttles none.
[throttle]
batch_probability = 0.0
clock_factor = 1.0
run_length = 1

[interference]
memory_slowdown = 0.35

# Rare fixed-length delays: {delayed} of {short} launches of the short kernels ran more than 2 us over
# their median; the largest excess was {largest / 1000:.2f} us.
[delays]
probability = {delayed / short:.2e}
min_ns = 2000.0
max_ns = {round(largest, -2):.1f}
""")
for kernel, curve, sigma in kernels:
    g = geometry[kernel]
    pairs = ", ".join(f"[{m}, {t}]" for m, t in curve)
    print(f"""[kernels.{kernel}]
blocks = {g['blocks']}
blocks_per_sm = {g['blocks_per_sm']}
curve_ns = [{pairs}]
[kernels.{kernel}.jitter]
body_sigma = {sigma:.5f}
tail_probability = 0.0
tail_alpha = 3.0
tail_scale = 0.01
tail_cap = 0.0
""")
