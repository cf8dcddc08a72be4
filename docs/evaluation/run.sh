#!/bin/bash
# Reproduces the evaluation tables in docs/method.md on the datasets pre-registered in
# docs/evaluation/preregistration.md (used for nothing else):
#   bash docs/evaluation/run.sh [WORKDIR]     (needs `cargo build --release` first; under a minute on 2 cores, 2026-11-22)
# OLD_WCETCTL=path/to/wcetctl also scores the method as it was before issue 13 on the same data;
# PREV_WCETCTL, as it was before the second round (built from 681ccab).
# ROUND=2 runs the second round's fresh report seeds (docs/evaluation/preregistration-2.md): every
# seed range shifted by 10,000; ROUND=3 and ROUND=4 by 20,000 and 30,000 (preregistration-3.md,
# preregistration-4.md), PREV_WCETCTL then being the method before that round.
set -euo pipefail
R=$(( (${ROUND:-1} - 1) * 10000 ))
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
    if [ "$p" = t ] || [ "$p" = m ]; then
        evaluate "$W" "$p" "$s" --calibrate-at 8,32,132 --sweep-launches 0
        [ -z "${PREV_WCETCTL:-}" ] ||
            evaluate "$PREV_WCETCTL" "prev_$p" "$s" --methods wcetd --calibrate-at 8,32,132 --sweep-launches 0
        return
    fi
    evaluate "$W" "$p" "$s"                                   # wcetd with its sweep, and the published strategies
    evaluate "$W" "ns_$p" "$s" --methods wcetd --sweep-launches 0   # wcetd without the sweep
    [ -z "${OLD_WCETCTL:-}" ] || evaluate "$OLD_WCETCTL" "old_$p" "$s" --methods wcetd
    [ -z "${PREV_WCETCTL:-}" ] || evaluate "$PREV_WCETCTL" "prev_$p" "$s" --methods wcetd
    # Every realisable size measured, as the daemon's default --calibration-budget does on these
    # profiles (second round on).
    local every
    every=$(cut -d, -f2 "$work/held_$s.csv" | tail -n +2 | sort -un | paste -sd,)
    evaluate "$W" "all_$p" "$s" --methods wcetd --calibrate-at "$every" --sweep-launches 0
}
for s in $(seq $((61001 + R)) $((61008 + R))); do run h "$s"; done
for s in $(seq $((62001 + R)) $((62004 + R))); do run e "$s" --profile embedded; done
for s in $(seq $((63001 + R)) $((63004 + R))); do run k "$s" --contended; done
for s in $(seq $((64001 + R)) $((64008 + R))); do run fh "$s" --profile $F/report-h200.toml; done
for s in $(seq $((65001 + R)) $((65004 + R))); do run fe "$s" --profile $F/report-embedded.toml; done
for s in $(seq $((66001 + R)) $((66004 + R))); do run fk "$s" --profile $F/report-h200.toml --contended; done
for s in $(seq $((67001 + R)) $((67008 + R))); do run t "$s"; done
# From the fourth round: three sizes on the H100's real medians replayed (preregistration-4.md).
if [ "${ROUND:-1}" -ge 4 ]; then
    for s in $(seq $((68001 + R)) $((68008 + R))); do run m "$s" --profile calibration/profiles/h100-measured.toml; done
fi
cd "$work" && python3 "$OLDPWD/docs/evaluation/summarize.py"
