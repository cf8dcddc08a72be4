#!/usr/bin/env python3
"""A wcetd client in Python with jeepney (pure Python: pip install jeepney).

Calls GetBound, GetCurve, MinPartition and Admission1.Check on the daemon at $WCETD_BUS_ADDRESS,
prints the answers, and exits non-zero on any failure.
Usage: WCETD_BUS_ADDRESS=unix:path=... python3 client.py [kernel] [sms]
"""
import os
import sys

from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection
from jeepney.wrappers import DBusErrorResponse, unwrap_msg


def main():
    address = os.environ.get("WCETD_BUS_ADDRESS")
    if not address:
        sys.exit("client.py: set WCETD_BUS_ADDRESS to the daemon's bus address")
    kernel = sys.argv[1] if len(sys.argv) > 1 else "needle"
    try:
        sms = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    except ValueError:
        sys.exit(f"client.py: sms `{sys.argv[2]}` is not a number; usage: client.py [kernel] [sms]")
    try:
        conn = open_dbus_connection(bus=address)
    except OSError as e:
        sys.exit(f"client.py: cannot reach the bus at {address}: {e}")

    def call(interface, method, signature=None, body=()):
        obj = DBusAddress("/org/wcetd/Wcetd1", bus_name="org.wcetd.Wcetd1", interface=interface)
        return unwrap_msg(conn.send_and_get_reply(new_method_call(obj, method, signature, body)))

    try:
        (bound,) = call("org.wcetd.Bounds1", "GetBound", "su", (kernel, sms))
        print(f"GetBound({kernel}, {sms}) = {bound} ns")
        (curve,) = call("org.wcetd.Bounds1", "GetCurve", "s", (kernel,))
        print(f"GetCurve({kernel}) = " + ", ".join(f"{m}:{b}" for m, b in curve))
        (m,) = call("org.wcetd.Bounds1", "MinPartition", "st", (kernel, bound))
        print(f"MinPartition({kernel}, {bound}) = {m} SMs")
        tasks = [("demo", [kernel], sms, 1_000_000, bound)]
        admitted, per_task = call("org.wcetd.Admission1", "Check", "a(sasutt)", (tasks,))
        for name, response, partition, slack in per_task:
            print(f"Check: {name} on {partition} SMs responds in {response} ns (slack {slack} ns)")
        print("Check: admitted" if admitted else "Check: NOT admitted")
        return 0 if admitted else 1
    except DBusErrorResponse as e:
        print(f"client.py: {e.name}: {' '.join(map(str, e.data))}", file=sys.stderr)
        return 1
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
