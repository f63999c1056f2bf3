#!/usr/bin/env python3
"""Time to first SSE event and to the end of a streamed chat completion, over N fresh connections.

usage: stream.py URL RUNS BODY [HEADER: VALUE ...]
prints JSON: {"ttfb_ms": [...], "ttft_ms": [...], "ttlb_ms": [...], "events": [...], "reads": [...]}

TTFB is measured to the first byte of the first `data:` event (not to the response headers: the
mock sends its headers before its first delay, the gateway sends them with the first event),
TTFT to the first event that carries text (`"content":"<non-empty>"`: OpenAI's first chunk has
only the role), and TTLB to the chunked terminator. Each run opens its own connection.
"""
import json
import re
import socket
import sys
import time
from urllib.parse import urlsplit

CONTENT = re.compile(rb'"content":\s*"[^"]')


def post_bytes(host: str, port: int, path: str, body: bytes, headers: list[str]) -> bytes:
    """An HTTP/1.1 POST of a JSON body with `headers` ("Name: value"), as sent on the wire."""
    req = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json",
           f"Content-Length: {len(body)}"] + headers
    return ("\r\n".join(req) + "\r\n\r\n").encode() + body


def one(host: str, port: int, path: str, body: bytes, headers: list[str]):
    raw = post_bytes(host, port, path, body, ["Accept: text/event-stream"] + headers)
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t0 = time.perf_counter()
    s.sendall(raw)
    buf = b""
    first = None
    token = None
    reads = 0
    # Headers.
    while b"\r\n\r\n" not in buf:
        data = s.recv(65536)
        if not data:
            raise RuntimeError("connection closed before headers")
        buf += data
    head, buf = buf.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ", 2)[1])
    if status != 200:
        raise RuntimeError(f"status {status}: {head.decode(errors='replace')} {buf[:300]!r}")
    chunked = b"transfer-encoding: chunked" in head.lower()
    length = None
    for line in head.split(b"\r\n")[1:]:
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    payload = b""
    done = False
    while not done:
        # Decode whatever complete chunks are buffered.
        if chunked:
            while True:
                if b"\r\n" not in buf:
                    break
                size_line, rest = buf.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    done = True
                    break
                if len(rest) < size + 2:
                    break
                payload += rest[:size]
                buf = rest[size + 2:]
        else:
            payload += buf
            buf = b""
            if length is not None and len(payload) >= length:
                done = True
        if first is None and b"data:" in payload:
            first = time.perf_counter()
        if token is None and CONTENT.search(payload):
            token = time.perf_counter()
        if done:
            break
        data = s.recv(65536)
        reads += 1
        if not data:
            break
        buf += data
    end = time.perf_counter()
    s.close()
    if first is None or token is None:
        raise RuntimeError(f"no SSE event with content in the response: {payload[:300]!r}")
    events = payload.count(b"data:")
    return (first - t0) * 1000, (token - t0) * 1000, (end - t0) * 1000, events, reads


def main() -> None:
    url, runs, body = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
    headers = sys.argv[4:]
    u = urlsplit(url)
    out = {"ttfb_ms": [], "ttft_ms": [], "ttlb_ms": [], "events": [], "reads": []}
    for i in range(runs + 3):
        ttfb, ttft, ttlb, events, reads = one(u.hostname, u.port, u.path, body, headers)
        if i < 3:  # warm-up
            continue
        out["ttfb_ms"].append(round(ttfb, 3))
        out["ttft_ms"].append(round(ttft, 3))
        out["ttlb_ms"].append(round(ttlb, 3))
        out["events"].append(events)
        out["reads"].append(reads)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
