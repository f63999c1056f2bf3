# Helpers for scripts/bench: process groups that are always cleaned up, free ports, wrk runs.
# Sourced after scripts/lib/env.sh (needs ROOT and log).

BENCH_LIB="$ROOT/scripts/lib/bench"
BENCH_PGIDS=()

# Stops every process group this script started: TERM, then KILL for whatever is left.
bench_stop_all() {
  local pgid
  for pgid in "${BENCH_PGIDS[@]}"; do kill -TERM -- -"$pgid" 2>/dev/null || true; done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    local alive=0
    for pgid in "${BENCH_PGIDS[@]}"; do kill -0 -- -"$pgid" 2>/dev/null && alive=1; done
    [[ $alive == 0 ]] && break
    sleep 0.3
  done
  for pgid in "${BENCH_PGIDS[@]}"; do kill -KILL -- -"$pgid" 2>/dev/null || true; done
  BENCH_PGIDS=()
}

# usage: bench_start LOG CPU DIR CMD... — runs CMD in DIR, in a session of its own, pinned to CPU
# (children inherit the affinity); sets BENCH_LAST_PGID to its session id (= process group id).
bench_start() {
  local logfile="$1" cpu="$2" dir="$3"
  shift 3
  (cd "$dir" && exec setsid taskset -c "$cpu" "$@" >"$logfile" 2>&1 </dev/null) &
  local pid=$!
  BENCH_PGIDS+=("$pid")
  BENCH_LAST_PGID="$pid"
}

bench_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# usage: bench_wait_http URL SECONDS [GREP] [PGID] [LOG] — waits until URL answers 200 (and its
# body matches GREP); gives up at once if process group PGID's leader is gone or LOG reports an ERROR
# (wrangler dev stays up after a startup error, waiting for a fix).
bench_wait_http() {
  local url="$1" secs="$2" want="${3:-}" pgid="${4:-}" logfile="${5:-}" deadline body
  deadline=$((SECONDS + secs))
  while ((SECONDS < deadline)); do
    if [[ -n $pgid ]] && ! kill -0 "$pgid" 2>/dev/null; then return 1; fi
    if [[ -n $logfile ]] && grep -q 'ERROR' "$logfile" 2>/dev/null; then return 1; fi
    if body="$(curl -fsS -m 2 "$url" 2>/dev/null)" && [[ -z $want || $body == *"$want"* ]]; then
      return 0
    fi
    sleep 0.3
  done
  return 1
}

# usage: bench_wrk_script FILE OUT BODY [HEADER=VALUE...] — a wrk Lua script that POSTs BODY and,
# when done, writes one line to OUT: requests duration_us socket_errors non2xx p50 p90 p99 p99.9 mean (µs).
bench_wrk_script() {
  local file="$1" out="$2" body="$3" h
  shift 3
  {
    echo 'wrk.method = "POST"'
    printf 'wrk.body = [==[%s]==]\n' "$body"
    echo 'wrk.headers["Content-Type"] = "application/json"'
    for h in "$@"; do printf 'wrk.headers["%s"] = [==[%s]==]\n' "${h%%=*}" "${h#*=}"; done
    printf 'local out = [==[%s]==]\n' "$out"
    cat <<'LUA'
function done(summary, latency, requests)
  local e = summary.errors
  local f = io.open(out, "w")
  f:write(string.format("%d %d %d %d %.1f %.1f %.1f %.1f %.1f\n", summary.requests, summary.duration,
    e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9), latency.mean))
  f:close()
end
LUA
  } >"$file"
}
