#!/usr/bin/env python3
"""What a whole workerd process spends per request, from `perf script` output.

usage: perf_split.py SCRIPT REQUESTS [SCRIPT REQUESTS]   (cpu-clock sampled at 2000 Hz)

SCRIPT is `perf script -F comm,tid,ip,sym,dso` of a `perf record -e cpu-clock -F 2000 -g -p PID`
taken while REQUESTS requests went through that process. Each sample is put in one column by its
leaf frame (JIT code, the runtime's C++ and V8, the kernel) and in one row by the nearest frame
above it that says why it ran (an API call from JS, a promise callback, GC, V8's background
threads, entering the handler); printed as microseconds per request, one column per SCRIPT.
V8's own profile sees only the isolate; this sees the runtime's work the isolate causes.
"""
import collections
import re
import sys

HZ = 2000
FRAME = re.compile(r"\s*[0-9a-f]+ (.*) \(([^()]*)\)$")
REASONS = (
    (("MethodCallback", "ConstructorCallback", "PropertyGetterCallback", "GetterCallback"), "an API call from JS"),
    (("CollectGarbage", "Scavenge", "MinorGCJob"), "GC"),
    (("DefaultJobWorker", "JobTaskWrapper"), "V8 background threads"),
    (("RunMicrotasks",), "promise callbacks (other)"),
    (("ServiceWorkerGlobalScope::request",), "entering the handler (other)"),
)


def samples(path):
    stack = []
    for line in open(path, errors="replace"):
        if not line.startswith(("\t", " ")):
            if stack:
                yield stack
            stack = []
            continue
        m = FRAME.match(line.rstrip("\n"))
        if m:
            stack.append((m.group(1), m.group(2)))
    if stack:
        yield stack


def where(stack):
    dso = stack[0][1]
    leaf = "kernel" if "kallsyms" in dso else "JIT" if "perf-" in dso or dso == "[unknown]" else "runtime"
    for sym, _ in stack:
        for needles, reason in REASONS:
            if any(n in sym for n in needles):
                return leaf, reason
    return leaf, "event loop and I/O (other)"


def main():
    args = sys.argv[1:]
    if len(args) < 2 or len(args) % 2:
        sys.exit(__doc__)
    runs = []
    for path, requests in zip(args[::2], args[1::2]):
        counts = collections.Counter(where(s) for s in samples(path))
        runs.append((path, counts, float(requests)))
    def row(label, wanted):
        """One table row: the samples whose (leaf, reason) `wanted` accepts, per request."""
        cells = (sum(v for k, v in c.items() if wanted(k)) / n / HZ * 1e6 for _, c, n in runs)
        print(f"| {label} | " + " | ".join(f"{x:.0f}" for x in cells) + " |")

    print("| | " + " | ".join(p for p, _, _ in runs) + " |")
    print("|---|" + "---:|" * len(runs))
    for leaf in ("JIT", "runtime", "kernel"):
        row(leaf, lambda k: k[0] == leaf)
    row("all", lambda k: True)
    totals = collections.Counter()
    for _, c, _ in runs:
        for (_, reason), v in c.items():
            totals[reason] += v
    for reason, _ in totals.most_common():
        row(reason, lambda k: k[1] == reason)

if __name__ == "__main__":
    main()
