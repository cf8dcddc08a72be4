#!/bin/bash
# Reproduces the evaluation tables in docs/method.md: simulate calibration and held-out runs for
# the seeds below, evaluate every method, and print the pooled tables.
#   bash docs/evaluation/run.sh [WORKDIR]     (needs `cargo build --release` first; ~10 min, 2 cores)
# The seeds were drawn after the last change to the method and used for nothing else.
set -euo pipefail
work=${1:-$(mktemp -d)}
W=${WCETCTL:-target/release/wcetctl}
run() { # prefix seed simulate-args...
    local p=$1 s=$2; shift 2
    # Simulated datasets are kept and reused when WORKDIR is given again (only evaluate reruns).
    [ -s "$work/cal_${p}_$s.csv" ] ||
        "$W" simulate --seed "$s" --launches 10000 --geometry-out "$work/geo_${p}_$s.csv" "$@" > "$work/cal_${p}_$s.csv"
    [ -s "$work/held_${p}_$s.csv" ] || "$W" simulate --seed $((s + 500)) "$@" > "$work/held_${p}_$s.csv"
    "$W" --json evaluate --samples "$work/cal_${p}_$s.csv" --holdout "$work/held_${p}_$s.csv" \
        --geometry "$work/geo_${p}_$s.csv" > "$work/$p$s.json"
}
for s in $(seq 41001 41016); do run h "$s"; done
for s in $(seq 42001 42004); do run e "$s" --profile embedded; done
for s in $(seq 43001 43004); do run k "$s" --contended; done
cd "$work" && python3 "$OLDPWD/docs/evaluation/summarize.py"
