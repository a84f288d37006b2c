#!/usr/bin/env bash
# python/test-with-proxy.sh SEEDS|embedded [pytest args...]
#
# Runs the Python library's tests (unit tests, the KIP-1289 scenarios, the security protocols, the
# stalled sidecar and the examples) through sharetx proxies in front of the cluster at SEEDS, or
# (embedded) through the zero-config start, sharetx with no upstream and its embedded cluster:
# builds cmd/sharetx, starts it on free loopback ports, waits for /readyz, makes a virtual
# environment (python/venv.sh), installs ./python and pytest in it, runs pytest with SHARETX_BOOTSTRAP (the proxy)
# and SHARETX_KAFKA_BOOTSTRAP (the cluster) set and SHARETX_REQUIRE_SIDECAR=1 (a test that needs
# the proxy fails rather than skips), and stops the proxies it started. Exit status: pytest's.
#
# More proxies: one whose listeners speak TLS (SHARETX_TLS_BOOTSTRAP, SHARETX_TLS_CA), one the
# stall test stops and resumes (SHARETX_STALL_BOOTSTRAP, SHARETX_STALL_PID), and with SASL_SEEDS
# (the cluster's SASL_PLAINTEXT listener) one in front of it and one with TLS listeners in front of
# it (SHARETX_SASL_BOOTSTRAP, SHARETX_SASL_TLS_BOOTSTRAP).
# Env: SASL_SEEDS  SHARETX_PY_WORK (a temp dir: proxy logs)  SHARETX_PY_VENV (the virtual
#      environment, reused when it exists; default python/.venv, ignored by git)  PYTHON (python3)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SEEDS=${1:?usage: python/test-with-proxy.sh SEEDS|embedded [pytest args...]}
shift
WORK=${SHARETX_PY_WORK:-$(mktemp -d /tmp/sharetx-python-test.XXXXXX)}
VENV=${SHARETX_PY_VENV:-$ROOT/python/.venv}
PY=${PYTHON:-python3}
mkdir -p "$WORK"
log() { echo "[test-python] $*" >&2; }

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }

t0=$SECONDS
# The virtual environment first (pip may download confluent-kafka the first time), beside the build.
VPY=$(SHARETX_PY_VENV=$VENV PYTHON=$PY "$ROOT/python/venv.sh" pytest 2>"$WORK/pip.log" | tail -n 1) || {
  log "python/venv.sh failed:"; tail -20 "$WORK/pip.log" >&2; exit 1; }
log "venv $VENV: $("$VPY" -c 'import confluent_kafka, sharetx; v = confluent_kafka.version(); print("confluent-kafka", v[0] if isinstance(v, tuple) else v, "librdkafka", confluent_kafka.libversion()[0], "sharetx", sharetx.__version__)')"
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/sharetx" ./cmd/sharetx)

PIDS=()
stop() {
  local pid
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill -CONT "$pid" 2>/dev/null || true; kill -TERM "$pid" 2>/dev/null || true; done
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
trap stop EXIT
METS=()
# start_proxy NAME UPSTREAM [ENV=VALUE...]: a proxy on free ports; sets NAME_BS, NAME_PID.
start_proxy() {
  local name=$1 upstream=$2 bs met pid deadline
  shift 2
  bs=127.0.0.1:$(free_port); met=127.0.0.1:$(free_port)
  local up=(--upstream "$upstream") data=()
  [ "$upstream" = embedded ] && up=() && data=(SHARETX_EMBEDDED_DATA_DIR="$WORK/embedded-$name")
  # SHARETX_PY_* are this script's, not proxy settings (the proxy refuses unknown SHARETX_ names).
  env -u SHARETX_PY_WORK -u SHARETX_PY_VENV SHARETX_LISTEN_BROKER_PORT_BASE=0 ${data[@]+"${data[@]}"} "$@" \
    "$WORK/sharetx" ${up[@]+"${up[@]}"} --bootstrap "$bs" --metrics "$met" >"$WORK/proxy-$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  deadline=$((SECONDS + 90))
  until curl -sf "http://$met/readyz" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then log "proxy $name exited:"; tail -30 "$WORK/proxy-$name.log" >&2; exit 1; fi
    if [ $SECONDS -ge $deadline ]; then log "proxy $name not ready after 90 s:"; tail -30 "$WORK/proxy-$name.log" >&2; exit 1; fi
    sleep 0.3
  done
  log "proxy $name pid $pid at $bs (metrics $met) in front of $upstream, ready at $((SECONDS - t0)) s"
  printf -v "${name}_BS" '%s' "$bs"
  printf -v "${name}_PID" '%s' "$pid"
  METS+=("$name=$met")
}

start_proxy plain "$SEEDS"
kafka_BS=$SEEDS
[ "$SEEDS" = embedded ] && kafka_BS=
sasl_BS= sasltls_BS=
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
  -keyout "$WORK/tls-key.pem" -out "$WORK/tls-cert.pem" >/dev/null 2>&1
tls_env=(SHARETX_LISTEN_TLS_ENABLED=true SHARETX_LISTEN_TLS_CERT_FILE="$WORK/tls-cert.pem" SHARETX_LISTEN_TLS_KEY_FILE="$WORK/tls-key.pem")
start_proxy tls "$SEEDS" "${tls_env[@]}"
if [ -n "${SASL_SEEDS:-}" ]; then
  # The proxy's own principal on the SASL listener (kafka.sh's test user); clients authenticate as themselves.
  sasl_env=(SHARETX_UPSTREAM_SASL_MECHANISM=SCRAM-SHA-256 SHARETX_UPSTREAM_SASL_USERNAME=sharetx SHARETX_UPSTREAM_SASL_PASSWORD=sharetx-secret)
  start_proxy sasl "$SASL_SEEDS" "${sasl_env[@]}"
  start_proxy sasltls "$SASL_SEEDS" "${tls_env[@]}" "${sasl_env[@]}"
fi
start_proxy stall "$SEEDS"

rc=0
(cd "$ROOT/python" && SHARETX_BOOTSTRAP=$plain_BS SHARETX_KAFKA_BOOTSTRAP=$kafka_BS SHARETX_SASL_BOOTSTRAP=$sasl_BS \
  SHARETX_SASL_TLS_BOOTSTRAP=$sasltls_BS SHARETX_TLS_BOOTSTRAP=$tls_BS SHARETX_TLS_CA=$WORK/tls-cert.pem \
  SHARETX_STALL_BOOTSTRAP=$stall_BS SHARETX_STALL_PID=$stall_PID SHARETX_REQUIRE_SIDECAR=1 \
  "$VPY" -m pytest -p no:cacheprovider -rs "$@") || rc=$?
if [ $rc != 0 ]; then
  log "pytest failed (rc=$rc); proxy warnings:"; grep -hE 'level=(WARN|ERROR)' "$WORK"/proxy-*.log | tail -20 >&2 || true
  for nm in "${METS[@]}"; do
    log "proxy ${nm%%=*}: its state and counters at the end"
    curl -sf "http://${nm#*=}/metrics" 2>/dev/null | grep -E '^sharetx_(tx_pending_records|txn_share_acknowledge_total|staging_failures_total|markers_total|client_acks_absorbed_total|shadow_topic_writes_refused_total)' >&2 || true
  done
fi
log "done in $((SECONDS - t0)) s (rc=$rc); proxy logs in $WORK"
exit $rc
