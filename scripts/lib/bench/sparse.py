#!/usr/bin/env python3
"""Latency when requests come apart, not back to back: each target answers one request in turn.

usage: sparse.py GAPS RUNS NAME=URL=AUTH=BODY ...
GAPS: milliseconds of idle after each request, comma-separated (0: the targets still take turns,
so each request finds caches holding the other targets' work). RUNS: requests per target and gap.
Each target keeps one connection; the order of the targets is shuffled every turn (fixed seed).
prints JSON: {"gaps": [...], "p50_ms": {NAME: [p50 per gap]}, "runs": RUNS}

wrk at c=1 sends the next request the moment the last one is answered, so the code and data a
request touches stay in the CPU's caches; traffic that arrives apart finds them cold.
"""
import json
import random
import socket
import statistics
import sys
import time
from urllib.parse import urlsplit

from stream import post_bytes  # the same request bytes as the stream timings send


class Target:
    def __init__(self, spec: str):
        self.name, url, auth, body = spec.split("=", 3)
        u = urlsplit(url)
        self.addr = (u.hostname, u.port)
        headers = [] if auth == "-" else [f"Authorization: Bearer {auth}"]
        self.request = post_bytes(u.hostname, u.port, u.path, body.encode(), headers)
        self.sock = None

    def connect(self):
        self.sock = socket.create_connection(self.addr, timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def once(self) -> float:
        """Milliseconds from sending the request to the whole (Content-Length) answer."""
        if self.sock is None:
            self.connect()
        t0 = time.perf_counter()
        self.sock.sendall(self.request)
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = self.sock.recv(65536)
            if not data:
                raise RuntimeError(f"{self.name}: connection closed before the answer's headers")
            buf += data
        head, body = buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        if status != 200:
            raise RuntimeError(f"{self.name}: status {status}: {head[:300]!r}")
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                      if line.lower().startswith(b"content-length:"))
        while len(body) < length:
            data = self.sock.recv(65536)
            if not data:
                raise RuntimeError(f"{self.name}: connection closed inside the answer")
            body += data
        elapsed = (time.perf_counter() - t0) * 1000
        if b"connection: close" in head.lower():
            self.sock.close()
            self.sock = None
        return elapsed


def main():
    gaps = [float(g) for g in sys.argv[1].split(",")]
    runs = int(sys.argv[2])
    targets = [Target(spec) for spec in sys.argv[3:]]
    rng = random.Random(16)
    p50 = {t.name: [] for t in targets}
    for gap in gaps:
        seen = {t.name: [] for t in targets}
        for _ in range(runs):
            rng.shuffle(targets)
            for t in targets:
                seen[t.name].append(t.once())
                time.sleep(gap / 1000)
        for name, values in seen.items():
            p50[name].append(round(statistics.median(values), 4))
    print(json.dumps({"gaps": gaps, "p50_ms": p50, "runs": runs}))


if __name__ == "__main__":
    main()
