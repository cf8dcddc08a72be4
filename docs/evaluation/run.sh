#!/bin/bash
# Reproduces the evaluation tables in docs/method.md on the datasets pre-registered in
# docs/evaluation/preregistration.md (used for nothing else):
#   bash docs/evaluation/run.sh [WORKDIR]     (needs `cargo build --release` first; under a minute on 2 cores, 2026-11-22)
# OLD_WCETCTL=path/to/wcetctl also scores the method as it was before issue 13 on the same data.
set -euo pipefail
work=${1:-$(mktemp -d)}
W=${WCETCTL:-target/release/wcetctl}
F=calibration/profiles/foreign
evaluate() { # binary prefix seed extra-evaluate-args...
    local bin=$1 p=$2 s=$3; shift 3
    "$bin" --json evaluate --samples "$work/cal_$s.csv" --holdout "$work/held_$s.csv" \
        --geometry "$work/geo_$s.csv" "$@" > "$work/$p$s.json"
}
run() { # prefix seed simulate-args...
    local p=$1 s=$2; shift 2
    # Simulated datasets are kept and reused when WORKDIR is given again (only evaluate reruns).
    [ -s "$work/cal_$s.csv" ] ||
        "$W" simulate --seed "$s" --launches 10000 --geometry-out "$work/geo_$s.csv" "$@" > "$work/cal_$s.csv"
    [ -s "$work/held_$s.csv" ] ||
        "$W" simulate --seed $((s + 500)) --launches 3000 "$@" > "$work/held_$s.csv"
    if [ "$p" = t ]; then
        evaluate "$W" t "$s" --calibrate-at 8,32,132 --sweep-launches 0
        return
    fi
    evaluate "$W" "$p" "$s"                                   # wcetd with its sweep, and the published strategies
    evaluate "$W" "ns_$p" "$s" --methods wcetd --sweep-launches 0   # wcetd without the sweep
    [ -z "${OLD_WCETCTL:-}" ] || evaluate "$OLD_WCETCTL" "old_$p" "$s" --methods wcetd
}
for s in $(seq 61001 61008); do run h "$s"; done
for s in $(seq 62001 62004); do run e "$s" --profile embedded; done
for s in $(seq 63001 63004); do run k "$s" --contended; done
for s in $(seq 64001 64008); do run fh "$s" --profile $F/report-h200.toml; done
for s in $(seq 65001 65004); do run fe "$s" --profile $F/report-embedded.toml; done
for s in $(seq 66001 66004); do run fk "$s" --profile $F/report-h200.toml --contended; done
for s in $(seq 67001 67008); do run t "$s"; done
cd "$work" && python3 "$OLDPWD/docs/evaluation/summarize.py"
