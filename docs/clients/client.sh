#!/bin/sh
# A wcetd client in shell with busctl: GetBound, GetCurve, MinPartition and Admission1.Check.
# Usage: WCETD_BUS_ADDRESS=unix:path=... ./client.sh [kernel] [sms]; exits non-zero on any failure.
set -eu
: "${WCETD_BUS_ADDRESS:?set WCETD_BUS_ADDRESS to the bus address of the daemon}"
kernel=${1:-needle}
sms=${2:-64}
call() {
    busctl --address="$WCETD_BUS_ADDRESS" call org.wcetd.Wcetd1 /org/wcetd/Wcetd1 "$@"
}
# Each answer is kept before it is cut: in a pipe, a failed call would not stop the script (sh
# has no pipefail) and an empty value would be printed.
answer=$(call org.wcetd.Bounds1 GetBound su "$kernel" "$sms")
bound=${answer#t }
echo "GetBound($kernel, $sms) = $bound ns"
curve=$(call org.wcetd.Bounds1 GetCurve s "$kernel")
echo "GetCurve($kernel) = $curve"
answer=$(call org.wcetd.Bounds1 MinPartition st "$kernel" "$bound")
echo "MinPartition($kernel, $bound) = ${answer#u } SMs"
# One task running $kernel once per 1 ms period, with its own bound as the deadline.
verdict=$(call org.wcetd.Admission1 Check 'a(sasutt)' 1 demo 1 "$kernel" "$sms" 1000000 "$bound")
echo "Check = $verdict"
case $verdict in "ba(sttx) true"*) ;; *) echo "client.sh: task set not admitted" >&2; exit 1 ;; esac
