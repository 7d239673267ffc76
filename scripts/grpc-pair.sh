#!/usr/bin/env bash
# Gateway CPU per PD request in engine-gRPC mode against HTTP mode, measured side by side: two
# gateways (HTTP PD and gRPC PD), each in front of its own instant SGLang pair, loaded at the same
# rate over the same window by their own `sluice-bench run`, CPU from /proc. On a shared machine the
# two modes measured one after the other move with its load by more than a change does; in one window
# both see the same load, so the ratio is taken per window (docs/benchmarks.md, issue #35).
#
#   scripts/grpc-pair.sh [rounds] [rate] [--stream]      (defaults: 4 rounds, 300 req/s, JSON answers)
#
# Binaries: $SLUICE_BIN, $SIM_BIN and $BENCH_BIN, or built from this tree into a temporary directory.
set -euo pipefail
rounds=${1:-4}
rate=${2:-300}
stream=${3:-}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
if [[ -z "${SLUICE_BIN:-}" || -z "${SIM_BIN:-}" || -z "${BENCH_BIN:-}" ]]; then
  go build -o "$tmp/" ./cmd/sluice ./cmd/sluice-sim ./cmd/sluice-bench
  SLUICE_BIN=$tmp/sluice SIM_BIN=$tmp/sluice-sim BENCH_BIN=$tmp/sluice-bench
fi

# sim NAME ARGS...: a prefill + decode pair; waits for its two "role url [bootstrap port]" lines.
sim() {
  local name=$1
  shift
  "$SIM_BIN" cluster --prefill 1 --decode 1 --mode instant --instant-output-tokens 8 "$@" >"$tmp/$name" 2>/dev/null &
  pids+=($!)
  for _ in $(seq 100); do
    [[ $(wc -l <"$tmp/$name") -ge 2 ]] && return
    sleep 0.1
  done
  echo "sluice-sim ($name) did not list its engines" >&2
  exit 1
}
sim http
sim grpc --grpc --grpc-engine-only --grpc-byte-token-ids
field() { awk -v r="$2" -v f="$3" '$1 == r { print $f }' "$tmp/$1"; }
common=(--host 127.0.0.1 --log-level error --pd-disaggregation --disable-health-check --policy cache_aware
  --max-connections 0 --prefill-max-inflight-requests-per-worker 1024 --prefill-queue-size 1024)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ph=$(port)
pg=$(port)
GOGC=400 "$SLUICE_BIN" serve "${common[@]}" --port "$ph" \
  --prefill "$(field http prefill 2)" "$(field http prefill 3)" --decode "$(field http decode 2)" &
pids+=($!)
hpid=$!
# The gateway pulls the engines' tokenizer with GetTokenizer (the simulator's byte-level one).
GOGC=400 "$SLUICE_BIN" serve "${common[@]}" --port "$pg" \
  --prefill "grpc://$(field grpc prefill 2 | sed 's|http://||')" "$(field grpc prefill 3)" \
  --decode "grpc://$(field grpc decode 2 | sed 's|http://||')" &
pids+=($!)
gpid=$!
for p in "$ph" "$pg"; do
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$p/readiness" >/dev/null 2>&1 && break
    sleep 0.1
  done
done

cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
load() {
  "$BENCH_BIN" run --url "http://127.0.0.1:$1" --model sim-model --rate "$rate" --duration 8s --warmup 1s \
    --prompt-tokens 64 --max-tokens 8 $stream --quiet --out "$2" >/dev/null 2>&1
}
for r in $(seq "$rounds"); do
  h0=$(cpu "$hpid")
  g0=$(cpu "$gpid")
  load "$ph" "$tmp/h.json" &
  l1=$!
  load "$pg" "$tmp/g.json" &
  l2=$!
  wait "$l1" "$l2"
  python3 - "$(getconf CLK_TCK)" "$h0" "$(cpu "$hpid")" "$g0" "$(cpu "$gpid")" "$tmp/h.json" "$tmp/g.json" "$r" <<'PY'
import json, sys
tck, h0, h1, g0, g1 = map(float, sys.argv[1:6])
h, g = json.load(open(sys.argv[6])), json.load(open(sys.argv[7]))
hc = (h1 - h0) / tck / h["total_sent"] * 1e6
gc = (g1 - g0) / tck / g["total_sent"] * 1e6
print(f"round {sys.argv[8]}: HTTP {hc:.0f} µs/request ({h['summary']['failed']} failed, TTFT p50 {h['summary']['ttft']['p50_ms']} ms), "
      f"gRPC {gc:.0f} µs/request ({g['summary']['failed']} failed, TTFT p50 {g['summary']['ttft']['p50_ms']} ms): gRPC/HTTP {gc / hc:.2f}")
PY
done
