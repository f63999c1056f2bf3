#!/usr/bin/env python3
"""What each function of a workerd process costs per request, from `perf script` output.

usage: perf_functions.py [--top N] SCRIPT REQUESTS [SCRIPT REQUESTS ...]   (cpu-clock at 2000 Hz)

SCRIPT is `perf script -F comm,tid,ip,sym,dso` of `perf record -e cpu-clock -F 2000 -g -p PID`,
taken while REQUESTS requests went through that workerd, which ran with V8's `--perf-basic-prof`
(the bench's Miniflares do with `BENCH_V8_FLAGS=--perf-basic-prof`): V8 then names its JIT code in
/tmp/perf-PID.map, so wasm functions appear by their Rust path and JS functions by file and line.
Prints µs per request: samples by kind of leaf (wasm, JS, the runtime and V8 in C++, the kernel),
then the functions with the most self time, then the wasm and JS functions with the most time
under them (inclusive: the runtime calls they make count). One column per SCRIPT.
"""
import collections
import re
import sys

from perf_split import HZ, samples  # the same `perf script` reading as the per-process split

TIER = re.compile(r"-\d+-(turbofan|maglev|liftoff|sparkplug|none)$")
JS_TIER = re.compile(r"^JS:[*+^~']+")
HASH = re.compile(r"::h[0-9a-f]{16}")


def name(sym):
    """One name per function, whichever tier compiled it and whichever build hash it carries."""
    return JS_TIER.sub("JS:", TIER.sub("", HASH.sub("", sym)))[:140]


def kind(sym, dso):
    if "kallsyms" in dso:
        return "kernel"
    if sym.startswith("JS:"):
        # V8 names wasm by the module's name section (Rust paths), JS by `file:line:col`.
        return "JS" if re.search(r"\.(m?js|cjs)\b|miniflare:", sym) else "wasm"
    if sym.startswith(("Builtin", "BytecodeHandler", "Stub:", "RegExp")):
        return "V8 builtins"
    return "runtime and V8 (C++)"


def profile(path, requests):
    per = 1e6 / HZ / requests
    kinds, self_time, inclusive = collections.Counter(), collections.Counter(), collections.Counter()
    total = 0
    for stack in samples(path):
        total += 1
        sym, dso = stack[0]
        kinds[kind(sym, dso)] += per
        self_time[name(sym)] += per
        for f in {name(s) for s, _ in stack if s.startswith("JS:")}:
            inclusive[f] += per
    return total * per, kinds, self_time, inclusive


def main():
    args = sys.argv[1:]
    top = 30
    if args[:1] == ["--top"]:
        top, args = int(args[1]), args[2:]
    if len(args) < 2 or len(args) % 2:
        sys.exit(__doc__)
    runs = [(p, profile(p, float(n))) for p, n in zip(args[::2], args[1::2])]

    print("µs per request, all samples: " + ", ".join(f"{p}: {t:.0f}" for p, (t, *_) in runs))
    kinds = sorted({k for _, (_, ks, _, _) in runs for k in ks}, key=lambda k: -runs[0][1][1].get(k, 0))
    print("\nby kind of leaf")
    for k in kinds:
        print("  " + "".join(f"{r[1][1].get(k, 0.0):9.1f}" for r in runs) + f"  {k}")
    first = runs[0][1]
    print(f"\nself time, the first profile's top {top}")
    for f, _ in first[2].most_common(top):
        print("  " + "".join(f"{r[1][2].get(f, 0.0):9.1f}" for r in runs) + f"  {f}")
    print(f"\ninclusive time of wasm and JS functions, the first profile's top {top}")
    for f, _ in first[3].most_common(top):
        print("  " + "".join(f"{r[1][3].get(f, 0.0):9.1f}" for r in runs) + f"  {f}")


if __name__ == "__main__":
    main()
