#!/usr/bin/env python3
"""Renders scripts/bench's results as markdown: prints it and, with --docs FILE, puts it between
the markers in that file (the prose around them is kept).

usage: report.py RESULTS_DIR [--docs docs/benchmarks.md]
"""
import json
import os
import re
import statistics
import sys

BEGIN = "<!-- BEGIN scripts/bench output -->"
END = "<!-- END scripts/bench output -->"

# Where each target runs: the session whose processes serve it, and how it is labelled.
TARGETS = {
    "direct": ("mock", "direct to the mock vendor"),
    "floor": ("floor", "floor: constant worker (JS)"),
    "passthrough": ("floor", "passthrough worker (JS `fetch` to the mock)"),
    "gateway": ("gateway", "gateway, model without limits"),
    "gateway_limited": ("gateway", "gateway, model with limits (limiter DO)"),
    "ni_passthrough": ("floor_ni", "passthrough worker (JS `fetch` to the mock)"),
    "ni_gateway": ("gateway_ni", "gateway, model without limits"),
    "mf_floor": ("miniflare", "floor: constant worker (JS)"),
    "mf_passthrough": ("miniflare", "passthrough worker (JS `fetch` to the mock)"),
    "mf_gateway": ("miniflare", "gateway, model without limits"),
    "mf_gateway_limited": ("miniflare", "gateway, model with limits (limiter DO)"),
    "mf_gateway_nobreaker": ("miniflare", "gateway, model with the default breaker switched off"),
    "mf_gateway_do": ("miniflare", "gateway, limits with every request through the DO (no leases)"),
    "workerd_floor": ("workerd", "floor: constant worker (JS)"),
    "mf_direct_messages": ("mock", "direct to the mock vendor's /v1/messages"),
    "mf_relay": ("miniflare", "relay worker (JS: parse, splice the model, fetch, read the answer's usage, answer with headers)"),
    "mf_gateway_messages": ("miniflare", "gateway /v1/messages, passed through to an Anthropic deployment"),
    "mf_gateway_agent": ("miniflare", "gateway /v1/messages, a coding agent's 34 kB body, passed through to an Anthropic deployment"),
    "mf_direct_responses": ("mock", "direct to the mock vendor's /v1/responses"),
    "mf_gateway_responses": ("miniflare", "gateway /v1/responses, passed through to an OpenAI deployment"),
    "mf_gateway_codex": ("miniflare", "gateway /v1/responses, a coding agent's 50 kB body, passed through to an OpenAI deployment"),
    "mf_gateway_codex_chat": ("miniflare", "gateway /v1/responses, the same 50 kB body, translated to a chat completions deployment"),
    "mf_gateway_chat_agent": ("miniflare", "gateway /v1/chat/completions, a coding agent's 33 kB body, passed through to an OpenAI deployment"),
    "mf_passthrough_stream": ("miniflare", "passthrough worker, a stream (the mock's slow stream)"),
    "mf_relay_stream": ("miniflare", "relay worker, the same stream (each chunk read and enqueued again in JS)"),
    "mf_native_stream": ("miniflare", "relay worker, the same stream written into a native (identity) stream"),
    "mf_gateway_stream": ("miniflare", "gateway, the same stream (`bench-stream`)"),
    "mf_gateway_noconsumer": ("miniflare", "experiment: gateway whose usage-queue consumer only acks (no export to R2)"),
    "mf_gateway_nolog_noqueue": ("miniflare", "experiment: gateway with `console.log` and the usage queue's `send` stubbed out"),
    "mf_rust_plain": ("miniflare", "relay worker in Rust: the JS relay's work, workers-rs used as its docs show"),
    "mf_rust_lean": ("miniflare", "relay worker in Rust with the gateway's I/O (body, exchange, response: one call into JS each)"),
}
# BENCH_COMPARE's rounds: this build and the other, alternating.
for _round in range(1, 10):
    TARGETS[f"mf_gateway_r{_round}"] = ("miniflare", f"gateway, model without limits (BENCH_COMPARE: this build, round {_round})")
    TARGETS[f"mf_compare_r{_round}"] = ("miniflare", f"gateway, model without limits (BENCH_COMPARE: the other build, round {_round})")
    TARGETS[f"mf_passthrough_r{_round}"] = ("miniflare", f"passthrough worker (round {_round})")
    TARGETS[f"mf_gateway_noconsumer_r{_round}"] = ("miniflare", f"experiment: consumer only acks (round {_round})")
    TARGETS[f"mf_gateway_nolog_noqueue_r{_round}"] = ("miniflare", f"experiment: queue `send` and `console.log` stubbed (round {_round})")
    TARGETS[f"mf_rust_plain_r{_round}"] = ("miniflare", f"relay worker in Rust, workers-rs plainly (round {_round})")
    TARGETS[f"mf_rust_lean_r{_round}"] = ("miniflare", f"relay worker in Rust, lean (round {_round})")
    TARGETS[f"mf_gateway_stream_r{_round}"] = ("miniflare", f"gateway, a stream (BENCH_COMPARE: this build, round {_round})")
    TARGETS[f"mf_compare_stream_r{_round}"] = ("miniflare", f"gateway, a stream (BENCH_COMPARE: the other build, round {_round})")
    for _door, _what in (("messages", "/v1/messages"), ("responses", "/v1/responses"), ("agent", "/v1/messages, an agent's body"),
                         ("codex", "/v1/responses, an agent's body"), ("codex_chat", "/v1/responses, an agent's body translated"),
                         ("chat_agent", "/v1/chat/completions, an agent's body")):
        TARGETS[f"mf_gateway_{_door}_r{_round}"] = ("miniflare", f"gateway {_what} (BENCH_COMPARE_DOORS: this build, round {_round})")
        TARGETS[f"mf_compare_{_door}_r{_round}"] = ("miniflare", f"gateway {_what} (BENCH_COMPARE_DOORS: the other build, round {_round})")
HARNESS = {"mock": "—", "floor": "wrangler dev", "gateway": "wrangler dev", "floor_ni": "wrangler dev, inspector detached ²",
           "gateway_ni": "wrangler dev, inspector detached ²", "miniflare": "Miniflare", "workerd": "workerd serve"}
WRANGLER_SESSIONS = ("gateway", "floor", "gateway_ni", "floor_ni")

PORTKEY_RPS = 1635


def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def wrk(results, name, conns):
    try:
        with open(os.path.join(results, f"{name}.c{conns}.out")) as f:
            v = f.read().split()
    except OSError:
        return None
    req, dur_us, sock, non2xx = (int(x) for x in v[:4])
    p50, p90, p99, p999, mean = (float(x) / 1000 for x in v[4:9])
    return {"req": req, "rps": req / (dur_us / 1e6), "sock": sock, "non2xx": non2xx,
            "p50": p50, "p90": p90, "p99": p99, "p999": p999, "mean": mean}


def roles_delta(results, tag, session, field="ticks"):
    """`field` (procstat's `ticks` or `minflt`) gained by each of the session's roles over run `tag`."""
    before = load(os.path.join(results, f"{tag}.before.json"), {}).get(session, {})
    after = load(os.path.join(results, f"{tag}.after.json"), {}).get(session, {})
    return {r: after[r].get(field, 0) - before.get(r, {}).get(field, 0) for r in after}


def proxy_apart(roles):
    """Whether a wrangler session's dev proxy runs in a workerd of its own (else, in the worker's)."""
    return "workerd-runtime" in roles


def runtime_role(session, role, roles):
    """What a process is to its session; `roles` are the session's own (a dev proxy in the
    worker's own workerd counts as the runtime: no split to make)."""
    if session in WRANGLER_SESSIONS:
        if role == "workerd-runtime":
            return "runtime"
        if role.startswith("workerd@"):
            return "proxy" if proxy_apart(roles) else "runtime"
    elif role.startswith("workerd"):
        return "runtime"
    if role in ("node", "esbuild"):
        return "node"
    return "other"


def runtime_cpu(results, W, name, conns, clk):
    """CPU per request of the runtime serving `name` during its c=`conns` run, if it ran."""
    c = cpu_per_request(results, name, conns, clk) if W.get(name) and W[name].get(conns) else None
    return c["runtime"] if c else None


def in_round(name, i):
    """A target's name in alternating round `i` (round 1 is the main targets)."""
    return name if i == 1 else f"{name}_r{i}"


def round_pairs(W, cpu_of, conns):
    """The passthrough and the gateway of each alternating round (round 1 is the main targets)."""
    out = []
    for i in range(1, 10):
        pt_name, gw_name = in_round("mf_passthrough", i), in_round("mf_gateway", i)
        pt, gw, pc, gc = W.get(pt_name), W.get(gw_name), cpu_of(pt_name), cpu_of(gw_name)
        if not (pt and gw and pc and gc and pt.get(1) and gw.get(1) and pt.get(conns) and gw.get(conns)):
            continue
        out.append({"pt_cpu": pc, "gw_cpu": gc, "cpu": gc - pc, "ratio": gw[conns]["rps"] / pt[conns]["rps"],
                    "p50": gw[1]["p50"] - pt[1]["p50"]})
    return out


def experiment_rounds(cpu_of):
    """The gateway and its two usage-pipeline experiments, CPU ms per request, in each round."""
    out = []
    for i in range(1, 10):
        row = {k: cpu_of(in_round(n, i)) for k, n in
               (("gw", "mf_gateway"), ("noconsumer", "mf_gateway_noconsumer"), ("noqueue", "mf_gateway_nolog_noqueue"))}
        if all(row.values()):
            out.append(row)
    return out


def rust_rounds(W, cpu_of):
    """The passthrough, the two Rust relays and the gateway of each round: CPU ms per request and c=1 p50."""
    out = []
    for i in range(1, 10):
        names = {k: in_round(n, i) for k, n in
                 (("pt", "mf_passthrough"), ("plain", "mf_rust_plain"), ("lean", "mf_rust_lean"), ("gw", "mf_gateway"))}
        cpu = {k: cpu_of(n) for k, n in names.items()}
        p50 = {k: W[n][1]["p50"] for k, n in names.items() if W.get(n) and W[n].get(1)}
        if all(cpu.values()) and len(p50) == len(names):
            out.append({"cpu": cpu, "p50": p50})
    return out


def rust_section(W, cpu_of, conns):
    """The Rust relays' rounds as a table and its medians (no lines when they were not measured)."""
    rust = rust_rounds(W, cpu_of)
    if not rust:
        return []
    out = ["**The relay in Rust** (`scripts/lib/bench/rust_relay`: the JS relay worker's work compiled to wasm and built as "
           "the gateway is; measured in the same alternating rounds; CPU ms per request at "
           f"c={conns}, and c=1 p50 in ms):", "",
           "| round | passthrough CPU | Rust relay, plain | Rust relay, lean | gateway | c=1 p50: passthrough | plain | lean | gateway |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, r in enumerate(rust, 1):
        c, l = r["cpu"], r["p50"]
        out.append(f"| {i} | {c['pt']:.3f} | {c['plain']:.3f} | {c['lean']:.3f} | {c['gw']:.3f} | "
                   f"{l['pt']:.3f} | {l['plain']:.3f} | {l['lean']:.3f} | {l['gw']:.3f} |")

    def med(kind, a, b):
        return statistics.median(r[kind][a] - r[kind][b] for r in rust)

    out += ["", f"Medians of the rounds, over the passthrough: the plain Rust relay {med('cpu', 'plain', 'pt'):+.3f} ms of CPU "
            f"and {med('p50', 'plain', 'pt'):+.3f} ms at c=1; the lean one {med('cpu', 'lean', 'pt'):+.3f} and "
            f"{med('p50', 'lean', 'pt'):+.3f}; the gateway over the lean relay {med('cpu', 'gw', 'lean'):+.3f} ms of CPU and "
            f"{med('p50', 'gw', 'lean'):+.3f} ms at c=1.", ""]
    return out


def warmup_requests(results, name, conns):
    """The requests of the warm-up before a timed run (its CPU is read from before the warm-up)."""
    try:
        with open(os.path.join(results, f"{name}.c{conns}.warmup.out")) as f:
            return int(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return 0


def cpu_per_request(results, name, conns, clk):
    session = TARGETS[name][0]
    w = wrk(results, name, conns)
    if not w or not w["req"]:
        return None
    w = dict(w, req=w["req"] + warmup_requests(results, name, conns))
    tag = f"{name}.c{conns}"
    out = {"runtime": 0.0, "proxy": 0.0, "node": 0.0, "other": 0.0}
    if session != "mock":
        deltas = roles_delta(results, tag, session)
        for role, ticks in deltas.items():
            out[runtime_role(session, role, deltas)] += ticks / clk * 1000 / w["req"]
        out["proxy_apart"] = proxy_apart(deltas)
    mock = roles_delta(results, tag, "mock").get("mock", 0)
    out["mock"] = mock / clk * 1000 / w["req"]
    out["total"] = out["runtime"] + out["proxy"] + out["node"] + out["other"]
    return out


def faults_per_request(results, name, conns):
    """Minor page faults per request in the runtime serving `name` during its c=`conns` run (fresh
    pages: on this VM each one is a trip to the host, so a process whose memory grows pays for it)."""
    session = TARGETS[name][0]
    w = wrk(results, name, conns)
    if session == "mock" or not w or not w["req"]:
        return None
    tag = f"{name}.c{conns}"
    deltas = roles_delta(results, tag, session)
    faults = sum(f for r, f in roles_delta(results, tag, session, "minflt").items()
                 if runtime_role(session, r, deltas) == "runtime")
    return faults / (w["req"] + warmup_requests(results, name, conns))


def peak_rss_mib(results, name, conns, which="runtime", port=None):
    """Peak RSS (MiB) of the runtime workerd serving NAME during its run."""
    session = TARGETS[name][0]
    peak = 0
    try:
        lines = open(os.path.join(results, f"{name}.c{conns}.rss.ndjson")).read().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            snap = json.loads(line).get(session, {})
        except ValueError:
            continue
        for role, v in snap.items():
            if runtime_role(session, role, snap) != which:
                continue
            if port is not None and role != f"workerd@{port}":
                continue
            peak = max(peak, v["rss_kb"])
    return peak / 1024 if peak else None


def idle_rss_mib(results, session, which="runtime", port=None):
    snap = load(os.path.join(results, "idle.json"), {}).get(session, {})
    kb = sum(v["rss_kb"] for r, v in snap.items()
             if runtime_role(session, r, snap) == which and (port is None or r == f"workerd@{port}"))
    return kb / 1024 if kb else None


def cpu_busy(path, cpu):
    try:
        for line in open(path):
            f = line.split()
            if f[0] == f"cpu{cpu}":
                v = [int(x) for x in f[1:]]
                return sum(v) - v[3] - v[4], sum(v)
    except OSError:
        pass
    return None


def others_share(results, meta):
    """Share of the gateway CPU that processes other than this benchmark's used while it measured."""
    cpu = meta.get("gateway_cpu", 0)
    a, b = cpu_busy(os.path.join(results, "stat.start"), cpu), cpu_busy(os.path.join(results, "stat.end"), cpu)
    start, end = load(os.path.join(results, "idle.json")), load(os.path.join(results, "end.json"))
    if not (a and b and start and end):
        return None
    ours = 0
    for session in ("gateway", "floor", "gateway_ni", "floor_ni", "miniflare", "workerd"):
        for role, v in end.get(session, {}).items():
            ours += v["ticks"] - start.get(session, {}).get(role, {"ticks": 0})["ticks"]
    busy, total = b[0] - a[0], b[1] - a[1]
    return max(0, busy - ours) / total if total else None


def ms(x):
    if x is None:
        return "—"
    return f"{x:.3f}" if x < 1 else (f"{x:.2f}" if x < 10 else f"{x:.1f}")


def signed(x):
    if x is None:
        return "—"
    return ("+" if x >= 0 else "−") + ms(abs(x))


def rps(x):
    return "—" if x is None else f"{x:,.0f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "—"
    r = a / b
    return f"{r:.3f}×" if r < 0.1 else (f"{r:.2f}×" if r < 10 else f"{r:.0f}×")


def pct(values, p):
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def yes(ok):
    return "**yes**" if ok else "**no**"


def render(results):
    meta = load(os.path.join(results, "meta.json"), {})
    conns = meta.get("conns", 16)
    clk = meta.get("clk_tck", 100)
    W = {n: {c: wrk(results, n, c) for c in (1, conns)} for n in TARGETS}
    S = {n: load(os.path.join(results, f"stream.{n}.json")) for n in
         ("direct", "passthrough", "gateway", "mf_passthrough", "mf_relay", "mf_hold", "mf_native", "mf_gateway")}
    out = []
    p = out.append

    p(f"### Run of {meta.get('date', '?')}")
    p("")
    dirty = " with uncommitted changes" if meta.get("dirty") else ""
    others = others_share(results, meta)
    others_txt = "" if others is None else (f" Other processes used {others:.0%} of CPU {meta.get('gateway_cpu')} (the gateway's) "
                                            "while this run measured (from /proc/stat minus this benchmark's own processes).")
    p(f"- Machine: {meta.get('nproc')} × {meta.get('cpu')} (`nproc` {meta.get('nproc')}), Linux {meta.get('kernel')}; "
      f"**load average {meta.get('load_start')}** when measuring began, {meta.get('load_end')} when it ended "
      f"(the benchmark itself keeps both CPUs busy).{others_txt}")
    p(f"- Build: commit `{meta.get('commit')}`{dirty}; release wasm {meta.get('wasm_bytes', 0) / 1e6:.2f} MB "
      f"({meta.get('wasm_gzip_bytes', 0) / 1e6:.2f} MB gzip -9), JS glue {meta.get('js_bytes', 0) / 1e3:.0f} kB.")
    p(f"- Runtimes: wrangler {meta.get('wrangler')} (`wrangler dev --log-level warn`, local), Miniflare {meta.get('miniflare')} "
      f"(the same built worker and wrangler.toml, no dev proxy, no inspector), workerd {meta.get('workerd')}.")
    p(f"- Load: {meta.get('wrk')}, 1 thread, `--latency`; {meta.get('duration_s')} s per run after a {meta.get('warmup_s')} s warm-up (and {meta.get('jit_warmup_s', 0)} s at c={meta.get('conns')} per target before any run); "
      f"c=1 and c={conns} keep-alive connections. The gateway's and the floors' process trees are pinned to CPU "
      f"{meta.get('gateway_cpu')} (`taskset`), wrk and the mock vendor to CPU {meta.get('load_cpu')}.")
    p(f"- Request: `POST /v1/chat/completions`, body `{meta.get('body')}`; the mock answers an 8-word completion "
      f"(OpenAI format) at once. Streaming: `delay_ms={meta.get('stream_delay_ms')}` before each of the mock's events, "
      f"`words={meta.get('stream_words')}`, {meta.get('stream_runs')} runs per target on fresh connections, "
      f"in {meta.get('stream_rounds', 1)} rounds with the targets alternating (each round after 3 warm-ups).")
    p("")

    # ---- Issue 16: the gateway's own cost, as ratios to the passthrough worker (Miniflare) -----
    def cpu_of(name):
        return runtime_cpu(results, W, name, conns, clk)

    pt_cpu, pt = cpu_of("mf_passthrough"), W.get("mf_passthrough")
    if pt_cpu and pt and pt.get(1) and pt.get(conns):
        p("**Issue 16** (Miniflare, one run; the gateway's own cost above the passthrough worker, which makes the same one "
          "upstream call in plain JS; the relay worker is the least a gateway does, in JS):")
        p("")
        p(f"| target | CPU ms/req | − passthrough | c={conns} req/s | ÷ passthrough | c=1 p50 (ms) | − passthrough |")
        p("|---|---:|---:|---:|---:|---:|---:|")
        for name in ("mf_passthrough", "mf_relay", "mf_rust_plain", "mf_rust_lean", "mf_gateway", "mf_gateway_limited", "mf_gateway_messages", "mf_gateway_agent",
                     "mf_gateway_responses", "mf_gateway_codex", "mf_gateway_codex_chat", "mf_gateway_chat_agent",
                     "mf_gateway_noconsumer", "mf_gateway_nolog_noqueue"):
            w, c = W.get(name), cpu_of(name)
            if not (w and w.get(1) and w.get(conns) and c):
                continue
            p(f"| {TARGETS[name][1]} | {c:.3f} | {c - pt_cpu:+.3f} | {rps(w[conns]['rps'])} | {w[conns]['rps'] / pt[conns]['rps']:.2f}× "
              f"| {ms(w[1]['p50'])} | {signed(w[1]['p50'] - pt[1]['p50'])} |")
        p("")
        faults = [(TARGETS[n][1].split(" (")[0], faults_per_request(results, n, conns)) for n in
                  ("mf_passthrough", "mf_gateway", "mf_gateway_noconsumer", "mf_gateway_nolog_noqueue") if W.get(n)]
        faults = [(label, f) for label, f in faults if f is not None]
        if faults:
            p(f"Minor page faults per request in the process serving each (c={conns} run; a fresh page is a trip to "
              "this VM's host, so a process whose memory grows pays for each): "
              + "; ".join(f"{label}: {f:.2f}" for label, f in faults) + ".")
            p("")
        sp_cpu, sg_cpu = cpu_of("mf_passthrough_stream"), cpu_of("mf_gateway_stream")
        sr_cpu, sn_cpu = cpu_of("mf_relay_stream"), cpu_of("mf_native_stream")
        if sp_cpu and sg_cpu:
            relayed = f", relay worker {sr_cpu:.3f} ms ({sr_cpu - sp_cpu:+.3f})" if sr_cpu else ""
            relayed += f", relay worker into a native stream {sn_cpu:.3f} ms ({sn_cpu - sp_cpu:+.3f})" if sn_cpu else ""
            p(f"CPU per streamed request (c={conns}, {meta.get('stream_words')} words, one event each plus role, usage and "
              f"`[DONE]`): passthrough {sp_cpu:.3f} ms{relayed}, gateway {sg_cpu:.3f} ms ({sg_cpu - sp_cpu:+.3f}).")
            p("")
        goals = []
        rounds = round_pairs(W, cpu_of, conns)
        if rounds:
            p(f"The passthrough and the gateway (model without limits) in {len(rounds)} alternating rounds; each verdict "
              "below is the median of the rounds:")
            p("")
            p(f"| round | passthrough CPU ms/req | gateway CPU ms/req | − passthrough | c={conns} ÷ passthrough | c=1 p50 − passthrough |")
            p("|---:|---:|---:|---:|---:|---:|")
            for i, r in enumerate(rounds, 1):
                p(f"| {i} | {r['pt_cpu']:.3f} | {r['gw_cpu']:.3f} | {r['cpu']:+.3f} | {r['ratio']:.2f}× | {r['p50']:+.3f} ms |")
            p("")
            med = {k: statistics.median(r[k] for r in rounds) for k in ("cpu", "ratio", "p50")}
            goals += [("gateway's own CPU per request above the passthrough ≤ 0.25 ms", med["cpu"] <= 0.25, f"{med['cpu']:+.3f} ms"),
                      (f"c={conns} throughput ≥ 0.6× the passthrough's", med["ratio"] >= 0.6, f"{med['ratio']:.2f}×"),
                      ("c=1 added p50 over the passthrough ≤ 0.25 ms", med["p50"] <= 0.25, f"{med['p50']:+.3f} ms")]
        sp, sg = S.get("mf_passthrough"), S.get("mf_gateway")
        for key, title in (("ttft_ms", "first token"), ("ttlb_ms", "last byte")):
            if sp and sg and key in sp and key in sg:
                d = pct(sg[key], 50) - pct(sp[key], 50)
                goals.append((f"streaming {title} within 0.3 ms of the passthrough's (p50)", d <= 0.3, f"{d:+.3f} ms"))
        for label, ok, value in goals:
            p(f"- {'met' if ok else 'NOT met'}: {label} (measured {value})")
        p("")
        sh, sr = S.get("mf_hold"), S.get("mf_relay")
        if sp and sh and sr and sg:
            gap = lambda x, key: f"{pct(x[key], 50) - pct(sp[key], 50):+.2f}"
            p("Stream p50s over the passthrough's (first token / last byte, ms): the relay worker "
              f"{gap(sr, 'ttft_ms')} / {gap(sr, 'ttlb_ms')}; the relay worker that answers only once text has come, "
              f"as the gateway does so that a failure before any text can still fall back, {gap(sh, 'ttft_ms')} / "
              f"{gap(sh, 'ttlb_ms')}; the gateway {gap(sg, 'ttft_ms')} / {gap(sg, 'ttlb_ms')}.")
            p("")
        for line in sparse_section(results):
            p(line)

    # ---- Headline ------------------------------------------------------------------------------
    p(f"| wrangler dev, as the issue measures it | direct | floor | gateway | gateway − floor | gateway / floor | gateway / direct | target | met |")
    p("|---|---:|---:|---:|---:|---:|---:|---|---|")
    checks = []

    def latency_rows(prefix, d, f, g, label):
        rows = []
        for key, conn, unit, target in (("p50", 1, "ms", 0.3), ("p90", 1, "ms", None), ("p99", 1, "ms", 1.0)):
            a, b, c = (x[conn][key] if x[conn] else None for x in (d, f, g))
            added = c - b if b is not None and c is not None else None
            tgt, met = "", ""
            if target is not None and added is not None:
                tgt = f"added < {target} ms"
                met = yes(added < target)
                checks.append((f"{label}: added {key} at c=1 < {target} ms", added < target, added))
            rows.append(f"| {prefix}c=1 {key} (ms) | {ms(a)} | {ms(b)} | {ms(c)} | {signed(added)} | {ratio(c, b)} | {ratio(c, a)} | {tgt} | {met} |")
        a, b, c = (x[conns]["rps"] if x[conns] else None for x in (d, f, g))
        ok = None if b is None or c is None else (c >= 0.8 * b and c > PORTKEY_RPS)
        if ok is not None:
            checks.append((f"{label}: c={conns} ≥ 80% of the floor and > {PORTKEY_RPS:,} req/s", ok, c / b))
        rows.append(f"| {prefix}c={conns} req/s | {rps(a)} | {rps(b)} | {rps(c)} | {'—' if b is None or c is None else f'{(c - b):+,.0f}'.replace('-', '−')} "
                    f"| {ratio(c, b)} | {ratio(c, a)} | ≥ 0.80× floor, > {PORTKEY_RPS:,} | {'' if ok is None else yes(ok)} |")
        for key in ("p50", "p99"):
            a, b, c = (x[conns][key] if x[conns] else None for x in (d, f, g))
            added = c - b if b is not None and c is not None else None
            rows.append(f"| {prefix}c={conns} {key} (ms) | {ms(a)} | {ms(b)} | {ms(c)} | {signed(added)} | {ratio(c, b)} | {ratio(c, a)} | | |")
        return rows

    for r in latency_rows("", W["direct"], W["floor"], W["gateway"], "wrangler dev"):
        p(r)

    def stream_rows(prefix, passthrough, gateway, label):
        rows = []
        d, f, g = S["direct"], S[passthrough], S[gateway]
        for key, title in (("ttfb_ms", "first byte (first event)"), ("ttft_ms", "first token (first text event)"),
                           ("ttlb_ms", "last byte")):
            a, b, c = (pct(x[key], 50) if x and key in x else None for x in (d, f, g))
            added = c - a if a is not None and c is not None else None
            tgt, met = "", ""
            if key in ("ttfb_ms", "ttft_ms") and added is not None:
                tgt, met = "added < 1 ms over direct", yes(added < 1.0)
                checks.append((f"{label}: streaming, {title} added < 1 ms at p50", added < 1.0, added))
            rows.append(f"| {prefix}stream: {title} p50 (ms) | {ms(a)} | {ms(b)} ¹ | {ms(c)} | {signed(c - b if b is not None and c is not None else None)} "
                        f"| {ratio(c, b)} | {ratio(c, a)} ({signed(added)}) | {tgt} | {met} |")
        return rows

    for r in stream_rows("", "passthrough", "gateway", "wrangler dev"):
        p(r)
    p(f"| **Miniflare, no dev proxy** | | | | | | | | |")
    for r in latency_rows("", W["direct"], W["mf_floor"], W["mf_gateway"], "Miniflare"):
        p(r)
    for r in stream_rows("", "mf_passthrough", "mf_gateway", "Miniflare"):
        p(r)
    p("")
    p("¹ For streams the floor column is the passthrough worker (a constant worker cannot stream the mock's events).")
    p("")

    # ---- Messages door -------------------------------------------------------------------------
    dm, gm, dc, gc = (W.get(n) for n in ("mf_direct_messages", "mf_gateway_messages", "direct", "mf_gateway"))
    dr, gr = (W.get(n) for n in ("mf_direct_responses", "mf_gateway_responses"))
    if all(x and x.get(1) and x.get(conns) for x in (dm, gm, dc, gc)):
        p("**The Messages and Responses doors beside chat completions** (Miniflare; each door's gateway figures against a "
          "direct call to the mock's own endpoint for that format; Messages and Responses pass the body through with the "
          "model spliced):")
        p("")
        p(f"| door | direct c=1 p50 (ms) | gateway c=1 p50 (ms) | added p50 | direct c={conns} req/s | gateway c={conns} req/s | gateway / direct |")
        p("|---|---:|---:|---:|---:|---:|---:|")
        doors = [("`/v1/chat/completions` → OpenAI", dc, gc), ("`/v1/messages` → Anthropic", dm, gm)]
        if all(x and x.get(1) and x.get(conns) for x in (dr, gr)):
            doors.append(("`/v1/responses` → OpenAI", dr, gr))
        for label, d, g in doors:
            p(f"| {label} | {ms(d[1]['p50'])} | {ms(g[1]['p50'])} | {signed(g[1]['p50'] - d[1]['p50'])} "
              f"| {rps(d[conns]['rps'])} | {rps(g[conns]['rps'])} | {ratio(g[conns]['rps'], d[conns]['rps'])} |")
        p("")

    # ---- Limiter -------------------------------------------------------------------------------
    p("**The limiter** (the same gateway model with and without `limits`, so the deployment's Durable Object is on the path):")
    p("")
    p(f"| harness | c=1 p50 without → with (ms) | added p50 | c=1 p99 without → with (ms) | c={conns} req/s without → with | with / without |")
    p("|---|---|---:|---|---|---:|")
    for label, a, b in (("wrangler dev", "gateway", "gateway_limited"), ("Miniflare", "mf_gateway", "mf_gateway_limited")):
        x1, y1, xc, yc = W[a][1], W[b][1], W[a][conns], W[b][conns]
        if not (x1 and y1 and xc and yc):
            continue
        p(f"| {label} | {ms(x1['p50'])} → {ms(y1['p50'])} | {signed(y1['p50'] - x1['p50'])} | {ms(x1['p99'])} → {ms(y1['p99'])} "
          f"| {rps(xc['rps'])} → {rps(yc['rps'])} | {ratio(yc['rps'], xc['rps'])} |")
        checks.append((f"{label}: the limiter adds no DO round trip (with/without ≥ 0.95 at c={conns})", yc["rps"] >= 0.95 * xc["rps"], yc["rps"] / xc["rps"]))
    extra_rows = (("mf_gateway_nobreaker", "mf_gateway", "Miniflare, default breaker off → on (no `limits`)"),
                  ("mf_gateway", "mf_gateway_do", "Miniflare, every request admitted and settled at the DO (leases off)"))
    for a, b, label in extra_rows:
        if not (W.get(a) and W.get(b) and W[a].get(1) and W[b].get(1) and W[a].get(conns) and W[b].get(conns)):
            continue
        x1, y1, xc, yc = W[a][1], W[b][1], W[a][conns], W[b][conns]
        p(f"| {label} | {ms(x1['p50'])} → {ms(y1['p50'])} | {signed(y1['p50'] - x1['p50'])} | {ms(x1['p99'])} → {ms(y1['p99'])} "
          f"| {rps(xc['rps'])} → {rps(yc['rps'])} | {ratio(yc['rps'], xc['rps'])} |")
        if a == "mf_gateway_nobreaker":
            checks.append((f"Miniflare: the default breaker costs no DO round trip (on/off ≥ 0.95 at c={conns})",
                           yc["rps"] >= 0.95 * xc["rps"], yc["rps"] / xc["rps"]))
    a, b = "mf_gateway", "mf_gateway_do"
    if W.get(a) and W.get(b) and W[a].get(1) and W[b].get(1) and W[a].get(conns) and W[b].get(conns):
        x1, y1, xc, yc = W[a][1], W[b][1], W[a][conns], W[b][conns]
        p("")
        p(f"The last row is one DO's admit+settle rate through the whole gateway: {rps(yc['rps'])} requests/s, two DO "
          f"calls each, i.e. about {rps(2 * yc['rps'])} decisions/s, and the round trips add {signed(y1['p50'] - x1['p50'])} ms at c=1 p50.")
    p("")
    p("If every limited request made a round trip to the deployment's DO, the rate with limits would sit near what one "
      "DO decides per second (about 400–600 on this machine, docs/limiter.md) and c=1 p50 would grow by the round trip "
      "(about 2.7 ms); equal figures mean a warm isolate admits locally, against a lease.")
    p("")

    # ---- Memory --------------------------------------------------------------------------------
    p("**Memory** (resident set of the workerd process that runs the worker; it holds the whole runtime, not only the isolate):")
    p("")
    p("| | idle, after warm-up (MiB) | peak under c=%d (MiB) |" % conns)
    p("|---|---:|---:|")
    p(f"| wrangler dev: floor | {ms(idle_rss_mib(results, 'floor'))} | {ms(peak_rss_mib(results, 'floor', conns))} |")
    p(f"| wrangler dev: gateway | {ms(idle_rss_mib(results, 'gateway'))} | {ms(peak_rss_mib(results, 'gateway', conns))} |")
    p(f"| wrangler dev: gateway's dev proxy (workerd; — when it runs in the gateway's own process) | {ms(idle_rss_mib(results, 'gateway', 'proxy'))} | {ms(peak_rss_mib(results, 'gateway', conns, 'proxy'))} |")
    p(f"| wrangler dev: gateway's node (wrangler) | {ms(idle_rss_mib(results, 'gateway', 'node'))} | {ms(peak_rss_mib(results, 'gateway', conns, 'node'))} |")
    p(f"| plain workerd: floor | {ms(idle_rss_mib(results, 'workerd'))} | {ms(peak_rss_mib(results, 'workerd_floor', conns))} |")
    mem = (load(os.path.join(results, "profile.json")) or {}).get("memory") or {}
    if "js_heap_used" in mem:
        wasm = sum(mem.get("wasm_memories") or [])
        p(f"| Miniflare: the gateway's isolate, V8 JS heap used (of total), right after the profiled c={conns} run | — | "
          f"{mem['js_heap_used'] / 2**20:.1f} (of {mem['js_heap_total'] / 2**20:.1f}) |")
        p(f"| Miniflare: the gateway's isolate, wasm linear memory (the Rust heap; {len(mem.get('wasm_memories') or [])} "
          f"`WebAssembly.Memory`; its high-water mark, which it never gives back: the usage consumer's batches), same moment "
          f"| — | {wasm / 2**20:.1f} |")
    p(f"| wasm bundle `build/index_bg.wasm` | {meta.get('wasm_bytes', 0) / 2**20:.2f} MiB raw | {meta.get('wasm_gzip_bytes', 0) / 2**20:.2f} MiB gzip |")
    p("")
    for line in cold_start(results):
        p(line)

    # ---- Every target --------------------------------------------------------------------------
    p("**Every target** (latency in ms; CPU = CPU time per request on the gateway's core, from `/proc/<pid>/stat` "
      f"from before the c={conns} run's {meta.get('warmup_s', 1)} s warm-up to after the run (a gateway's: {meta.get('settle_s', 0)} s after, so "
      "its usage events' export is counted with it), over both's requests, split by process; errors = socket errors + "
      "non-2xx over both runs):")
    p("")
    p(f"| target | harness | c=1 p50 | c=1 p90 | c=1 p99 | c={conns} req/s | c={conns} p50 | c={conns} p99 | CPU ms/req: runtime | dev proxy | node | mock | errors |")
    p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, (session, label) in TARGETS.items():
        a, b = W[name][1], W[name][conns]
        if not a and not b:
            continue
        cpu = cpu_per_request(results, name, conns, clk) or {}
        errs = sum((x["sock"] + x["non2xx"]) for x in (a, b) if x)
        g = lambda x, k: ms(x[k]) if x else "—"
        p(f"| {label} | {HARNESS[session]} | {g(a, 'p50')} | {g(a, 'p90')} | {g(a, 'p99')} | {rps(b['rps'] if b else None)} | "
          f"{g(b, 'p50')} | {g(b, 'p99')} | {ms(cpu.get('runtime')) if session != 'mock' else '—'} | "
          f"{ms(cpu.get('proxy')) if session in WRANGLER_SESSIONS and cpu.get('proxy_apart') else '—'} | "
          f"{ms(cpu.get('node')) if session != 'mock' else '—'} | "
          f"{ms(cpu.get('mock'))} | {errs} |")
    p("")
    p("² `VSCODE_INSPECTOR_OPTIONS` set, which makes wrangler 4.86 leave its inspector proxy unattached to the runtime "
      "(it thinks VS Code's debugger owns it): the same `wrangler dev` otherwise.")
    p("")
    exp = experiment_rounds(lambda name: runtime_cpu(results, W, name, conns, clk))
    if exp:
        p("**The usage pipeline's share** (the experiments patch the copied bundle's JS glue, nothing else changes; measured "
          "in the same alternating rounds as the gateway, CPU ms per request at "
          f"c={conns}; under Miniflare the queue's broker and R2 run in the gateway's own process, in production elsewhere):")
        p("")
        p("| round | gateway | consumer only acks | queue `send` (and `console.log`) stubbed | export: consumer + R2 | whole pipeline: send, broker, consumer, R2 |")
        p("|---:|---:|---:|---:|---:|---:|")
        for i, r in enumerate(exp, 1):
            p(f"| {i} | {r['gw']:.3f} | {r['noconsumer']:.3f} | {r['noqueue']:.3f} | {r['gw'] - r['noconsumer']:+.3f} | "
              f"{r['gw'] - r['noqueue']:+.3f} |")
        med = lambda f: statistics.median(f(r) for r in exp)
        p("")
        p(f"Medians of the rounds: the export costs {med(lambda r: r['gw'] - r['noconsumer']):+.3f} ms per request and the "
          f"whole usage pipeline {med(lambda r: r['gw'] - r['noqueue']):+.3f} ms.")
        p("")
    for line in rust_section(W, lambda name: runtime_cpu(results, W, name, conns, clk), conns):
        p(line)
    p("**Streams** (ms; p50 / p90 over the runs):")
    p("")
    p("| target | harness | first byte | first token | last byte | events | socket reads per response (median) |")
    p("|---|---|---:|---:|---:|---:|---:|")
    for name, label, harness in (("direct", "direct to the mock vendor", "—"), ("passthrough", "passthrough worker", "wrangler dev"),
                                 ("gateway", "gateway", "wrangler dev"), ("mf_passthrough", "passthrough worker", "Miniflare"),
                                 ("mf_relay", "relay worker (each chunk read and enqueued in JS)", "Miniflare"),
                                 ("mf_hold", "relay worker holding the answer until the first text, as the gateway does", "Miniflare"),
                                 ("mf_native", "relay worker writing each chunk into a native (identity) stream", "Miniflare"),
                                 ("mf_gateway", "gateway", "Miniflare")):
        x = S[name]
        if not x:
            continue
        p(f"| {label} | {harness} | {ms(pct(x['ttfb_ms'], 50))} / {ms(pct(x['ttfb_ms'], 90))} | "
          f"{ms(pct(x.get('ttft_ms'), 50))} / {ms(pct(x.get('ttft_ms'), 90))} | "
          f"{ms(pct(x['ttlb_ms'], 50))} / {ms(pct(x['ttlb_ms'], 90))} | {statistics.median(x['events']):.0f} | {statistics.median(x['reads']):.0f} |")
    p("")

    # ---- Profile -------------------------------------------------------------------------------
    prof = load(os.path.join(results, "profile.json"))
    if prof:
        total = prof["total_ms"] or 1
        p(f"**V8 CPU profile** of the gateway isolate under Miniflare at c={conns} ({prof['samples']:,} samples at "
          f"{prof['interval_us']} µs; the profiler itself slows the isolate down, so read shares, not absolute times):")
        p("")
        p("| where | share of samples |")
        p("|---|---:|")
        for cat, v in prof["categories"].items():
            p(f"| {cat} | {v / total:.0%} |")
        p("")
        p("| function (inclusive: itself and what it calls) | share |")
        p("|---|---:|")
        shown = 0
        for name, v in prof["inclusive"]:
            if name.startswith(("(root)", "wasm_bindgen::convert", "js_sys::futures", "js-to-wasm", "wasm-to-js", "(anonymous)")):
                continue
            if re.match(r"^[A-Za-z_$]{1,3} \[js", name):  # minified wasm-bindgen glue
                continue
            if "shim" in name or "catch wrapper" in name:
                continue
            p(f"| `{name[:110]}` | {v / total:.0%} |")
            shown += 1
            if shown >= 14:
                break
        p("")
        p("| function (self time) | share | called from |")
        p("|---|---:|---|")
        for entry in prof["self"][:12]:
            name, v = entry[0], entry[1]
            callers = ", ".join(f"`{c[:70]}`" for c, _ in (entry[2] if len(entry) > 2 else [])[:2])
            p(f"| `{name[:90]}` | {v / total:.0%} | {callers} |")
        p("")

    # ---- Targets -------------------------------------------------------------------------------
    p("**Targets (issue 8)**, as measured in this run:")
    p("")
    for label, ok, value in checks:
        p(f"- {'met' if ok else 'NOT met'}: {label} (measured {value:.3g})")
    p("")
    return "\n".join(out)


def write_docs(path, body):
    block = f"{BEGIN}\n{body}\n{END}"
    try:
        text = open(path).read()
    except OSError:
        text = "# Benchmarks\n\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(text)


def sparse_section(results):
    """Requests apart (sparse.py): each target's p50 when the targets take turns, and over the passthrough's."""
    d = load(os.path.join(results, "sparse.json"))
    base = (d or {}).get("p50_ms", {}).get("mf_passthrough")
    if not base:
        return []
    gaps = d["gaps"]
    head = lambda g: "in turn, no idle" if g == 0 else f"in turn, {g:g} ms idle after each"
    out = [f"Requests that come apart ({d['runs']} per target and column; each target answers one request in turn, "
           "on its own kept-alive connection). wrk's c=1 above sends the next request the moment the last is "
           "answered, so one target's code and data stay in the CPU's caches; here each request finds them holding "
           "the other targets' work, as sparse traffic does. p50 in ms, and over the passthrough's:", "",
           "| target | " + " | ".join(head(g) for g in gaps) + " |", "|---|" + "---:|" * len(gaps)]
    for name, values in d["p50_ms"].items():
        cells = [f"{v:.3f} ({v - b:+.3f})" for v, b in zip(values, base)]
        out.append(f"| {TARGETS.get(name, (None, name))[1]} | " + " | ".join(cells) + " |")
    return out + [""]


def cold_start(results):
    """The cold-start table (coldstart.cjs): lines to print, or none when it was not measured."""
    cold = load(os.path.join(results, "coldstart.json"))
    if not cold:
        return []
    med = {who: {k: statistics.median(v) for k, v in d.items() if k != "young_cpu_ms"} for who, d in cold.items()}
    g, b = med["gateway"], med["passthrough"]
    n = len(cold["gateway"]["first_ms"])
    out = [f"**Cold start** (Miniflare; each round starts a new workerd process, so a new isolate, for each worker; "
           f"medians of {n} rounds; the first and second requests each on a new connection, timed to the answer's "
           "last byte):", "",
           "| | runtime ready (module and wasm loaded) | first request | second request | first − second |",
           "|---|---:|---:|---:|---:|"]
    for label, m in (("passthrough worker", b), ("gateway, model `bench` (default breaker)", g)):
        out.append(f"| {label} | {m['ready_ms']:.0f} ms | {m['first_ms']:.1f} ms | {m['second_ms']:.1f} ms | "
                   f"{m['first_ms'] - m['second_ms']:+.1f} ms |")
    out.append(f"| gateway − passthrough | {g['ready_ms'] - b['ready_ms']:+.0f} ms | {g['first_ms'] - b['first_ms']:+.1f} ms | "
               f"{g['second_ms'] - b['second_ms']:+.1f} ms | |")
    first = ", ".join(f"{x:.1f}" for x in cold["gateway"]["first_ms"])
    out += ["", f"The gateway's first requests, round by round: {first} ms. A first request reads the key's and its tenant's records, the "
            "route table, the budgets and the prices from KV (side by side), asks the deployment's Durable Object "
            "for its first lease and runs every wasm function on its path for the first time (V8 compiles each on "
            "its first call).", ""]
    out += first_compile(results)
    young = {who: d.get("young_cpu_ms") or {} for who, d in cold.items()}
    blocks = list(young["gateway"])
    if blocks and all(young["passthrough"].get(b) for b in blocks):
        out += ["The same young isolates' CPU per request (ms; the workerd process, medians of the rounds), a request at a "
                "time on one kept-alive connection, each block's usage export counted with it. V8 runs new code "
                "unoptimised at first and compiles what gets hot on the same process:", "",
                "| requests | " + " | ".join(blocks) + " |", "|---|" + "---:|" * len(blocks)]
        rows = [("passthrough worker", "passthrough"), ("gateway", "gateway")]
        if all(young.get("compare", {}).get(b) for b in blocks):
            rows.append(("gateway, the compared build (BENCH_COMPARE; the two took turns going first)", "compare"))
        for label, who in rows:
            out.append(f"| {label} | " + " | ".join(f"{statistics.median(young[who][b]):.2f}" for b in blocks) + " |")
        out.append("| gateway ÷ passthrough | " + " | ".join(
            f"{statistics.median(young['gateway'][b]) / max(statistics.median(young['passthrough'][b]), 1e-9):.1f}×"
            for b in blocks) + " |")
        out.append("")
    return out


def first_compile(results):
    """What V8 compiled for the first request (first_compile.cjs): lines to print, or none."""
    compiled = load(os.path.join(results, "first_compile.json"))
    if not compiled:
        return []
    g = compiled["gateway"]
    kb = lambda n: f"{n / 1024:,.0f} kB"
    largest = "; ".join(f"`{name}` {kb(size)}" for size, name in g["largest"][:5])
    out = [f"What V8 compiled for the gateway's first request (a new isolate; `--perf-basic-prof`'s map): until its answer, "
           f"{kb(g['answer']['wasm_bytes'])} of machine code for {g['answer']['wasm_functions']} wasm functions (Liftoff, "
           f"on each function's first call) and {kb(g['answer']['js_bytes'])} for {g['answer']['js_functions']} JS "
           f"functions; in the 300 ms after it (the usage event, the settle) {kb(g['after']['wasm_bytes'])} more for "
           f"{g['after']['wasm_functions']} wasm functions. Under Miniflare the Durable Objects run in the gateway's "
           f"isolate, so the object's side of the first lease is counted too. The largest: {largest}."]
    c = compiled.get("compare")
    if c:
        out[0] += (f" The compared build (BENCH_COMPARE): {kb(c['answer']['wasm_bytes'])} for "
                   f"{c['answer']['wasm_functions']} wasm functions until the answer, {kb(c['after']['wasm_bytes'])} after it.")
    return out + [""]


def quick(results, names):
    """BENCH_QUICK: one line per target, CPU per request beside the passthrough worker's."""
    meta = load(os.path.join(results, "meta.json"), {}) or {}
    clk = meta.get("clk_tck") or os.sysconf("SC_CLK_TCK")
    conns = meta.get("conns") or 16
    rows, bases = [], {}
    for name in names:
        w1, wc = wrk(results, name, 1), wrk(results, name, conns)
        cpu = cpu_per_request(results, name, conns, clk)
        if not (w1 and wc and cpu):
            continue
        if name.startswith("mf_passthrough"):
            bases[name] = (cpu["runtime"], wc["rps"], w1["p50"])
        rows.append((name, w1["p50"], wc["rps"], cpu["runtime"], wc["sock"] + wc["non2xx"] + w1["sock"] + w1["non2xx"]))
    print(f"| target (Miniflare) | c=1 p50 (ms) | c={conns} req/s | CPU ms/req | CPU − passthrough | req/s ÷ passthrough | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, p50, rps_, cpu, errors in rows:
        # A stream is compared with the passthrough's stream, everything else with its JSON call.
        # A round's gateway is compared with the same round's passthrough when there is one.
        round_ = re.search(r"_r(\d+)$", name)
        base = bases.get("mf_passthrough_stream" if "_stream" in name else "mf_passthrough")
        if round_ and not name.startswith("mf_passthrough") and f"mf_passthrough_r{round_.group(1)}" in bases:
            base = bases[f"mf_passthrough_r{round_.group(1)}"]
        extra = (f"{cpu - base[0]:+.3f} | {rps_ / base[1]:.2f}×") if base else "— | —"
        print(f"| {name} | {p50:.3f} | {rps_:,.0f} | {cpu:.3f} | {extra} | {errors} |")
    W = {n: {c: wrk(results, n, c) for c in (1, conns)} for n in names}

    def cpu_of(name):
        return runtime_cpu(results, W, name, conns, clk)

    rounds = round_pairs(W, cpu_of, conns)
    if len(rounds) > 1:
        med = {k: statistics.median(r[k] for r in rounds) for k in ("cpu", "ratio", "p50")}
        print(f"\nMedian of {len(rounds)} alternating rounds (passthrough, gateway): CPU {med['cpu']:+.3f} ms over the "
              f"passthrough, c={conns} {med['ratio']:.2f}× its req/s, c=1 p50 {med['p50']:+.3f} ms.")
    rust = rust_section(W, cpu_of, conns)
    if rust:
        print("\n" + "\n".join(rust).rstrip())
    sparse = sparse_section(results)
    if sparse:
        print("\n" + "\n".join(sparse).rstrip())
    cold = cold_start(results)
    if cold:
        print("\n" + "\n".join(cold))
    prof = load(os.path.join(results, "profile.json"))
    if prof:
        total = prof["total_ms"] or 1
        print("\n| category | share |\n|---|---:|")
        for cat, v in prof["categories"].items():
            print(f"| {cat} | {v / total:.1%} |")
        print("\n| function (self time) | share | called from |\n|---|---:|---|")
        for entry in prof["self"][:30]:
            callers = ", ".join(f"`{c[:60]}`" for c, _ in (entry[2] if len(entry) > 2 else [])[:2])
            print(f"| `{entry[0][:80]}` | {entry[1] / total:.1%} | {callers} |")


def main():
    results = sys.argv[1]
    if "--quick" in sys.argv:
        quick(results, sys.argv[sys.argv.index("--quick") + 1:])
        return
    body = render(results)
    print(body)
    if "--docs" in sys.argv:
        write_docs(sys.argv[sys.argv.index("--docs") + 1], body)
        print(f"\n(written to {sys.argv[sys.argv.index('--docs') + 1]})", file=sys.stderr)


if __name__ == "__main__":
    main()
