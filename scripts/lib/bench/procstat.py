#!/usr/bin/env python3
"""CPU time and RSS of the processes in some sessions, grouped by role.

usage: procstat.py NAME=SESSION_ID...
prints one JSON object: {NAME: {role: {"ticks": utime+stime in clock ticks, "rss_kb": N, "minflt": minor page
faults, "n": processes}}}

Roles: workerd-runtime (the workerd behind wrangler dev's proxy, on an ephemeral entry port),
workerd@PORT (a workerd miniflare started serving PORT: wrangler dev's proxy, or a standalone
Miniflare), workerd (a plain `workerd serve`), node (wrangler or the Miniflare script),
esbuild, mock, other.
"""
import re
import json
import os
import sys


def role_of(cmdline: list[str]) -> str:
    exe = os.path.basename(cmdline[0]) if cmdline else ""
    joined = " ".join(cmdline)
    if exe == "workerd":
        m = re.search(r"--socket-addr=entry=[^:\s]+:([0-9]+)", joined)
        if not m:
            return "workerd"
        return "workerd-runtime" if m.group(1) == "0" else f"workerd@{m.group(1)}"
    if exe == "node" or "wrangler" in joined or "miniflare" in joined:
        return "node"
    if exe == "esbuild":
        return "esbuild"
    if exe == "mock-provider":
        return "mock"
    return "other"


def stat(pid: str):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    sid = int(rest[3])
    ticks = int(rest[11]) + int(rest[12])
    rss_kb = int(rest[21]) * os.sysconf("SC_PAGE_SIZE") // 1024
    minflt = int(rest[7])
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    return sid, ticks, rss_kb, minflt, cmdline


def main() -> None:
    wanted = {}
    for arg in sys.argv[1:]:
        name, sid = arg.split("=", 1)
        wanted[int(sid)] = name
    out: dict = {name: {} for name in wanted.values()}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            sid, ticks, rss_kb, minflt, cmdline = stat(pid)
        except (OSError, IndexError, ValueError):
            continue
        if sid not in wanted:
            continue
        slot = out[wanted[sid]].setdefault(role_of(cmdline), {"ticks": 0, "rss_kb": 0, "minflt": 0, "n": 0})
        slot["ticks"] += ticks
        slot["rss_kb"] += rss_kb
        slot["minflt"] += minflt
        slot["n"] += 1
    print(json.dumps(out))


if __name__ == "__main__":
    main()
