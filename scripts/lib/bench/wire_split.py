#!/usr/bin/env python3
"""Where a request's wait goes, read from a packet capture on loopback.

usage: wire_split.py TARGET_PORT VENDOR_PORT CAPTURE

CAPTURE is `tcpdump -i lo -n -tt -l "tcp port TARGET_PORT or tcp port VENDOR_PORT"` output taken
while requests went one at a time (wrk -c1, or curl in a loop) to the worker on TARGET_PORT, which
calls the mock vendor on VENDOR_PORT. Per request: the client's request → the worker's request
to the vendor ("before"), → the vendor's first answer packet ("vendor"), → the worker's first
answer packet ("after"). For a streamed answer also, per vendor packet in order, how long until
the worker's next packet to the client ("relay"): a native pipe takes the kernel's time, a worker
that touches every chunk adds its own. Prints p50s in milliseconds.
"""
import re
import statistics
import sys

LINE = re.compile(r"(\d+\.\d+) IP 127\.0\.0\.1\.(\d+) > 127\.0\.0\.1\.(\d+): .*length (\d+)")


def requests(path, target, vendor):
    """Each request's packets with a payload: when it came, the vendor call, both answers."""
    current = None
    for line in open(path):
        m = LINE.match(line)
        if not m or int(m.group(4)) == 0:
            continue
        t, src, dst = float(m.group(1)), m.group(2), m.group(3)
        if dst == target and src != vendor:
            if current:
                yield current
            current = {"t0": t, "call": None, "vendor": [], "client": []}
        elif current is None:
            continue
        elif dst == vendor and current["call"] is None:
            current["call"] = t
        elif src == vendor:
            current["vendor"].append(t)
        elif src == target:
            current["client"].append(t)
    if current:
        yield current


def main():
    target, vendor, path = sys.argv[1], sys.argv[2], sys.argv[3]
    rows = {}

    def add(key, value):
        rows.setdefault(key, []).append(value)

    for r in requests(path, target, vendor):
        if r["call"] is None or not r["vendor"] or not r["client"]:
            continue
        add("before", r["call"] - r["t0"])
        add("vendor", r["vendor"][0] - r["call"])
        add("after", next((c for c in r["client"] if c >= r["vendor"][0]), r["client"][-1]) - r["vendor"][0])
        add("total", r["client"][-1] - r["t0"])
        if len(r["vendor"]) > 2:
            for i, tv in enumerate(r["vendor"]):
                sent = next((c for c in r["client"] if c >= tv), None)
                if sent is not None:
                    add(f"relay {i}", sent - tv)
    if not rows:
        sys.exit("no request with a vendor call in the capture")
    for key, values in rows.items():
        print(f"{key:10s} p50 {statistics.median(values) * 1000:8.3f} ms  (n={len(values)})")


if __name__ == "__main__":
    main()
