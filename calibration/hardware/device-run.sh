#!/usr/bin/env bash
# What ran on the lent GPU machine (which has no Rust toolchain and no dbus-daemon): release
# binaries built here and stripped into $BIN (default .device), dbus-daemon and its libraries in
# $BIN/dbus (a wrapper that sets LD_LIBRARY_PATH for the copied libraries), results under $OUT. Every step has its own time limit, so one hang cannot take the
# rest of the call with it. Usage: device-run.sh check|campaign NAME|probes|daemon|hang
set -u
BIN=${BIN:-.device}
OUT=${OUT:?OUT must name the results directory}
export PATH="$PWD/$BIN/dbus:$PATH" RUST_LOG=${RUST_LOG:-info} NO_COLOR=1

step() { echo "=== $* ($(date -u +%H:%M:%S))"; }

# SIGTERM, then SIGKILL if wcetd is still there 10 s later: a second daemon must never start on
# the same state directory while the first lives (a stop can hang, in the driver or its exit).
# Fails if it outlives SIGKILL too.
stop_daemon() {
    kill "$1"
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    echo "wcetd ($1) still running 10 s after SIGTERM: SIGKILL"
    kill -9 "$1"
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    echo "wcetd ($1) still running 10 s after SIGKILL"
    return 1
}

case ${1:-} in
check)
    step "device"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.applications.graphics,temperature.gpu,power.draw,persistence_mode --format=csv
    step "real_gpu test"
    # Not real_gpu_hang: its kernel never ends and keeps its SMs until the process exits (`hang`).
    timeout 240 "$BIN/libtest" real_gpu --skip real_gpu_hang --ignored --nocapture --test-threads 1
    echo "real_gpu rc=$?"
    step "placement probe"
    timeout 60 "$BIN/wcetctl" probe --backend cuda
    timeout 60 "$BIN/wcetctl" --json probe --backend cuda > "$OUT/placement.json"
    ;;
campaign)
    name=${2:?campaign needs a name}
    step "campaign $name"
    # Contended launches at small partitions take tens of milliseconds each (the stressor starves
    # them of memory bandwidth), so contended sweeps name fewer sizes and launches.
    timeout "${LIMIT:-300}" "$BIN/wcetctl" campaign --backend cuda --launches "${LAUNCHES:-1000}" \
        --interference "${INTERFERENCE:-isolated}" ${SIZES:+--sizes "$SIZES"} \
        ${PROBE:+--delay-probe "$PROBE"} --out "/tmp/$name" 2>&1 | tr '\r' '\n' | grep -v '^\s*$' | tail -3
    echo "campaign rc=${PIPESTATUS[0]}"
    nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv
    tar czf "$OUT/$name.tar.gz" -C /tmp "$name"
    ;;
probes)
    # The delay probe on several partitions (does a partition see delays the whole device
    # does not?), 50,000 launches each.
    step "delay probes"
    timeout 200 "$BIN/wcetctl" campaign --backend cuda --launches 1 --kernels hotspot --sizes 8 \
        --delay-probe 50000 --delay-probe-sizes 8,56,96,104,112,132 --out /tmp/probes
    echo "probes rc=$?"
    tar czf "$OUT/probes.tar.gz" -C /tmp probes
    ;;
daemon)
    step "wcetd --backend cuda"
    state=/tmp/wcetd-state
    rm -rf "$state"; mkdir -p "$state"
    # The README's example manifest, and a copy launched with the wrong scalar (a = 3, where its
    # checksum is of y = 2x): its output check must fail that kernel alone.
    wrong=/tmp/wrong-kernel
    rm -rf "$wrong"; mkdir -p "$wrong"
    cp calibration/kernels/example/saxpy.cu "$wrong/"
    sed -e 's/^name = .*/name = "example.wrong-args"/' -e 's/{ f32 = 2.0 }/{ f32 = 3.0 }/' \
        calibration/kernels/example/saxpy.toml > "$wrong/wrong.toml"
    "$BIN/wcetctl" kernels check calibration/kernels/example/saxpy.toml "$wrong/wrong.toml"
    # A shorter screen and heavy-tail campaign than the defaults, to fit the lease.
    # Isolated bounds only: contended launches on small partitions take tens of milliseconds
    # each on an H100, more than the lease allows for the whole suite.
    "$BIN/wcetd" --backend cuda --state-dir "$state" --screen-launches 500 \
        --heavy-tail-launches 1000 --kernel-dir calibration/kernels/example \
        --kernel-dir "$wrong" --interference "${INTERFERENCE:-isolated}" \
        --metrics-file "$OUT/wcetd.prom" > "$OUT/wcetd.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do [ -s "$state/bus-address" ] && break; sleep 0.1; done
    ctl() { timeout 60 "$BIN/wcetctl" --state-dir "$state" "$@"; }
    ctl status
    # The initial calibration is job 1; wait for it by recalibrating nothing else: poll status.
    for _ in $(seq 200); do
        ctl status 2>/dev/null | grep -v "example.wrong-args" | grep -q "not calibrated\|calibrating" || break
        sleep 1
    done
    ctl status
    for k in $(ctl list); do ctl curve "$k"; done
    ctl --json bound hotspot 64 | tee "$OUT/bound-before-restart.json"
    ctl --json bound example.saxpy 64
    ctl --gpu 0 status
    ctl observed hotspot 64
    grep -E "job finished|output check|rejected" "$OUT/wcetd.log"
    grep VmRSS "/proc/$pid/status"
    stopped=0; stop_daemon "$pid" || stopped=$?
    tail -5 "$OUT/wcetd.log"
    [ "$stopped" = 0 ] || { echo "not restarting on $state while the first wcetd lives"; exit 1; }
    # A restart on what was saved: the store loads every launch time into the spill file; the
    # bounds must come back the same, GetBoundInfo's medians and an export read the times back.
    step "restart on the saved state"
    rm -f "$state/bus-address"
    "$BIN/wcetd" --backend cuda --state-dir "$state" --interference "${INTERFERENCE:-isolated}" \
        --kernel-dir calibration/kernels/example > "$OUT/wcetd-restart.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do [ -s "$state/bus-address" ] && break; sleep 0.1; done
    ctl status
    ctl --json bound hotspot 64 | tee "$OUT/bound-after-restart.json"
    ctl export > "$OUT/export-after-restart.json"; echo "export rc=$? $(wc -c < "$OUT/export-after-restart.json") bytes"
    grep VmRSS "/proc/$pid/status"
    stop_daemon "$pid"
    tail -3 "$OUT/wcetd-restart.log"
    ;;
hang)
    # The launch time limit on a kernel that never ends (an engineering check, last in a lease:
    # the hung kernel holds its SMs until its process exits). The test sets a 5 s limit and
    # fails unless the device is given up within about a second of it. rc 124 or 137 after
    # "test result: ok" means the test passed but its process did not exit: libcuda's exit-time
    # teardown waits on the running kernel (the daemon, after a hang, ends with _exit for this).
    step "real_gpu_hang (5 s launch time limit)"
    timeout -k 5 60 "$BIN/libtest" real_gpu_hang --ignored --nocapture --test-threads 1 \
        > "$OUT/hang.log" 2>&1
    echo "real_gpu_hang rc=$?" | tee -a "$OUT/hang.log"
    tail -5 "$OUT/hang.log"
    step "the GPU after the hung process"
    # Its compute process may take a moment to go: up to 10 s, then what is left is recorded.
    for _ in $(seq 20); do
        [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ] && break
        sleep 0.5
    done
    nvidia-smi --query-compute-apps=pid --format=csv | tee "$OUT/hang-compute-apps.csv"
    timeout 60 "$BIN/wcetctl" --json probe --backend cuda > "$OUT/placement-after-hang.json"
    echo "probe after the hang rc=$?" | tee -a "$OUT/hang.log"
    # The daemon's own way out: a manifest kernel that never ends, a 5 s limit. wcetd must lose
    # the device, save, and end with status 1 (which the unit restarts) through _exit; 124 or 137
    # here means it hung on its way out.
    step "wcetd with a kernel that never ends (--launch-timeout 5)"
    never=/tmp/never-kernel state=/tmp/wcetd-hang-state
    rm -rf "$never" "$state"; mkdir -p "$never" "$state"
    cp src/gpu/cuda/support.cu "$never/gate.cu"
    printf '%s\n' 'name = "test.never"' 'module = "gate.cu"' 'entry = "wcetd_gate"' \
        'grid = [1, 1, 1]' 'block = [1, 1, 1]' 'args = [{ u64 = 9223372036854775807 }]' \
        > "$never/never.toml"
    "$BIN/wcetctl" kernels check "$never/never.toml"
    timeout -k 5 120 "$BIN/wcetd" --backend cuda --state-dir "$state" --no-initial-calibration \
        --interference isolated --launch-timeout 5 --kernel-dir "$never" \
        > "$OUT/wcetd-hang.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do [ -s "$state/bus-address" ] && break; sleep 0.1; done
    timeout 60 "$BIN/wcetctl" --state-dir "$state" recalibrate test.never
    wait "$pid"
    echo "wcetd after the hang rc=$? (1: lost the device and left; 124 or 137: hung)" | tee -a "$OUT/hang.log"
    grep -E "hung|abandoned|teardown|lost" "$OUT/wcetd-hang.log" | tail -5
    ;;
*)
    echo "usage: $0 check|campaign NAME|probes|daemon|hang" >&2
    exit 2
    ;;
esac
