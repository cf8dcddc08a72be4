#!/usr/bin/env python3
"""Report production launch times to wcetd without blocking the launch path (Python, jeepney).

A scheduler copies the `Reporter` class: `record()` is called on the launch path and only appends
to a bounded in-memory queue (it never touches the bus and never waits); a background thread
batches the times per (kernel, partition size) and sends them with org.wcetd.Monitor1.Report.
When the queue is full, times are dropped and counted rather than blocking a launch.

While wcetd is not on the bus (restarting, or the bus itself restarting), the times are kept,
within the same capacity, and sent when it is back: a launch time that would raise a bound (rule
1) must not be lost to a restart. A report the daemon refused is not retried (the error says what
was wrong). A call that got no reply may have been counted before the daemon went away; sent
again it is counted twice, which raises no bound that one copy would not.

Reporting needs root, the daemon's user, or membership of group `wcetd` or `wcetd-report`.

Run as a demonstration against the daemon at $WCETD_BUS_ADDRESS: it reports times just below the
bound of KERNEL on SMS SMs, and one above it (an overrun), then prints what GetObserved says.
Usage: WCETD_BUS_ADDRESS=unix:path=... python3 reporter.py [kernel] [sms] [count]
"""
import collections
import os
import sys
import threading
import time

from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection
from jeepney.wrappers import DBusErrorResponse, unwrap_msg

NAME = "org.wcetd.Wcetd1"
PATH = "/org/wcetd/Wcetd1"
MAX_PER_CALL = 65536  # the daemon refuses more times in one Report
MAX_TIME_NS = 3_600_000_000_000  # the daemon refuses a time of 0 or above an hour...
MAX_ERRORS_KEPT = 100  # ...and one refused time refuses its whole call, so they are kept out
# The daemon is not on the bus, or did not answer: the times are kept and sent again.
AWAY = {
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
    "org.freedesktop.DBus.Error.NoReply",
    "org.freedesktop.DBus.Error.Disconnected",
    "org.freedesktop.DBus.Error.Timeout",
}


class Reporter:
    """Batches (kernel, sms, time_ns) and reports them from a thread of its own."""

    def __init__(self, address, batch=1024, interval_s=0.5, capacity=1 << 20):
        self.batch = batch
        self.interval_s = interval_s
        self.capacity = capacity
        self.dropped = 0  # queue full
        self.invalid = 0  # 0 ns or above an hour: never sent (one would refuse its whole batch)
        self.refused = 0  # times in calls the daemon refused, or still unsent at close()
        self.sent = 0
        self.errors = []  # the last MAX_ERRORS_KEPT reasons
        self._queue = collections.deque()  # append and popleft are atomic in CPython
        self._pending = []  # chunks kept while the daemon is away: (kernel, sms, times)
        self._pending_count = 0  # read by the launch path (an int: atomic in CPython)
        self._away = None  # why the last send did not reach the daemon, while it is away
        self._wake = threading.Event()
        self._closing = False
        self._deadline = None
        self._address = address
        self._conn = open_dbus_connection(bus=address)  # used by the reporter thread only
        self._monitor = DBusAddress(PATH, bus_name=NAME, interface="org.wcetd.Monitor1")
        self._thread = threading.Thread(target=self._run, name="wcetd-reporter", daemon=True)
        self._thread.start()

    def record(self, kernel, sms, time_ns):
        """The launch path: O(1), no bus, no lock, never waits."""
        if not 0 < time_ns <= MAX_TIME_NS:
            self.invalid += 1
            return
        if len(self._queue) + self._pending_count >= self.capacity:
            self.dropped += 1
            return
        self._queue.append((kernel, sms, time_ns))
        if len(self._queue) >= self.batch:
            self._wake.set()

    def close(self, wait_s=10.0):
        """Send what is queued, waiting up to `wait_s` (plus one call's timeout, at worst) for a
        daemon that is away, and stop the thread; what is still unsent then is counted in
        `refused`."""
        self._deadline = time.monotonic() + wait_s
        self._closing = True
        self._wake.set()
        self._thread.join()
        if self._conn is not None:
            self._conn.close()

    def _run(self):
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            self._flush()
            if self._closing and not self._queue and not self._pending:
                return
            if self._closing and time.monotonic() > self._deadline:
                unsent = self._pending_count + len(self._queue)
                self.refused += unsent
                self._note(f"{unsent} times unsent at close: {self._away}")
                return

    def _note(self, error):
        self.errors.append(error)
        del self.errors[:-MAX_ERRORS_KEPT]

    def _flush(self):
        groups = collections.defaultdict(list)
        while self._queue:
            kernel, sms, t = self._queue.popleft()
            self._pending_count += 1  # still within the capacity record() checks
            groups[(kernel, sms)].append(t)
        for (kernel, sms), times in groups.items():
            for i in range(0, len(times), MAX_PER_CALL):
                self._pending.append((kernel, sms, times[i:i + MAX_PER_CALL]))
        while self._pending:
            kernel, sms, chunk = self._pending[0]
            away = self._send(kernel, sms, chunk)
            if away:
                if self._away is None:
                    print(f"reporter.py: wcetd is away ({away}): keeping {self._pending_count} "
                          "times to send when it is back", file=sys.stderr, flush=True)
                self._away = away
                return  # the rest waits with it, in order
            self._pending.pop(0)
            self._pending_count -= len(chunk)
        self._away = None

    def _send(self, kernel, sms, chunk):
        """Report one chunk; returns why the daemon did not get it, or None (sent, or refused)."""
        msg = new_method_call(self._monitor, "Report", "suat", (kernel, sms, chunk))
        try:
            if self._conn is None:
                self._conn = open_dbus_connection(bus=self._address)
            unwrap_msg(self._conn.send_and_get_reply(msg))
            self.sent += len(chunk)
        except DBusErrorResponse as e:
            if e.name in AWAY:
                return e.name
            # A refused report is not retried: the message says what was wrong.
            self.refused += len(chunk)
            self._note(f"{e.name}: {' '.join(map(str, e.data))}")
        except Exception as e:  # the bus itself went away, or connecting again failed
            # (jeepney raises OSError for a broken socket, ValueError for a failed handshake):
            # connect again next time. Nothing else is raised here, and the thread must not die.
            if self._conn is not None:
                try:
                    self._conn.close()
                except OSError:
                    pass
            self._conn = None
            return f"the bus: {e!r}"
        return None


def main():
    address = os.environ.get("WCETD_BUS_ADDRESS")
    if not address:
        sys.exit("reporter.py: set WCETD_BUS_ADDRESS to the daemon's bus address")
    kernel = sys.argv[1] if len(sys.argv) > 1 else "hotspot"
    try:
        sms = int(sys.argv[2]) if len(sys.argv) > 2 else 64
        count = int(sys.argv[3]) if len(sys.argv) > 3 else 5000
    except ValueError:
        sys.exit("reporter.py: sms and count must be numbers; usage: reporter.py [kernel] [sms] [count]")
    try:
        conn = open_dbus_connection(bus=address)
    except OSError as e:
        sys.exit(f"reporter.py: cannot reach the bus at {address}: {e}")

    def call(interface, method, signature=None, body=()):
        obj = DBusAddress(PATH, bus_name=NAME, interface=interface)
        return unwrap_msg(conn.send_and_get_reply(new_method_call(obj, method, signature, body)))

    try:
        # WCETD_REPORT_BOUND: the bound to report around, without asking (the daemon may be away:
        # the reporter then keeps the times until it is back, up to WCETD_REPORT_WAIT_S seconds).
        if os.environ.get("WCETD_REPORT_BOUND"):
            bound = int(os.environ["WCETD_REPORT_BOUND"])
        else:
            (bound,) = call("org.wcetd.Bounds1", "GetBound", "su", (kernel, sms))
        print(f"GetBound({kernel}, {sms}) = {bound} ns")
        reporter = Reporter(address)
        for i in range(count - 1):
            reporter.record(kernel, sms, bound // 2 + i % (bound // 4))  # stand-ins for measured times
        reporter.record(kernel, sms, bound + 1000)  # one launch over its bound
        reporter.close(wait_s=float(os.environ.get("WCETD_REPORT_WAIT_S", "10")))
        print(f"reported {reporter.sent} times, dropped {reporter.dropped}, "
              f"invalid {reporter.invalid}, refused {reporter.refused}")
        for e in reporter.errors:
            print(f"reporter.py: {e}", file=sys.stderr)
        conn.close()  # the bus may have restarted while the reporter waited: ask on a new one
        conn = open_dbus_connection(bus=address)
        (obs,) = call("org.wcetd.Monitor1", "GetObserved", "su", (kernel, sms))
        v = {k: val[1] for k, val in obs.items()}
        print(f"GetObserved({kernel}, {sms}): count={v['count']} p50={v['p50_ns']} p99={v['p99_ns']} "
              f"max={v['max_ns']} overruns={v['overruns']} bound={v['bound_ns']}")
        return 1 if reporter.errors else 0
    except DBusErrorResponse as e:
        print(f"reporter.py: {e.name}: {' '.join(map(str, e.data))}", file=sys.stderr)
        return 1
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
