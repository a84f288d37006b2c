#!/usr/bin/env bash
# java/test-with-proxy.sh SEEDS|embedded [mvn args...]
#
# Runs the Java library's tests (unit tests and the KIP-1289 scenarios) through a sharetx proxy in
# front of the cluster at SEEDS, or (embedded) through the zero-config start, sharetx with no
# upstream and its embedded cluster (franz-go's kfake): builds cmd/sharetx, starts it on free loopback ports, waits for
# /readyz, runs `mvn -B -o test` (plus the given args, e.g. -Dkafka.version=4.2.2) with
# SHARETX_BOOTSTRAP (the proxy) and SHARETX_KAFKA_BOOTSTRAP (the cluster) set, and stops the
# proxy it started. Exit status: mvn's. The proxy's log is kept in $SHARETX_JAVA_WORK (printed).
#
# A third proxy (SHARETX_STALL_BOOTSTRAP, SHARETX_STALL_PID) is the time-out test's to stop and resume.
# Env: SASL_SEEDS (the cluster's SASL_PLAINTEXT listener: a second proxy in front of it, for the
#      SASL tests; SHARETX_SASL_BOOTSTRAP, and one with TLS listeners, SHARETX_SASL_TLS_BOOTSTRAP)  MVN_OFFLINE (1: mvn -o; by default mvn downloads what the Maven cache lacks, the first time only)  SHARETX_JAVA_WORK (a temp dir)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SEEDS=${1:?usage: java/test-with-proxy.sh SEEDS [mvn args...]}
shift
WORK=${SHARETX_JAVA_WORK:-$(mktemp -d /tmp/sharetx-java-test.XXXXXX)}
mkdir -p "$WORK"
log() { echo "[test-java] $*" >&2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }

t0=$SECONDS
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/sharetx" ./cmd/sharetx)
# start_proxy NAME UPSTREAM [ENV=VALUE...]: a proxy on free ports; sets NAME_BS, NAME_PID.
PIDS=()
stop() {
  local pid
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
trap stop EXIT
start_proxy() {
  local name=$1 upstream=$2 bs met pid deadline
  shift 2
  bs=127.0.0.1:$(free_port); met=127.0.0.1:$(free_port)
  local up=(--upstream "$upstream") data=()
  # Embedded: each proxy a cluster and a data directory of its own (one directory serves one cluster).
  [ "$upstream" = embedded ] && up=() && data=(SHARETX_EMBEDDED_DATA_DIR="$WORK/embedded-$name")
  # Broker listeners on free ports too (clients learn them from the rewritten metadata).
  # SHARETX_JAVA_WORK is this script's, not a proxy setting (the proxy refuses unknown SHARETX_ names).
  env -u SHARETX_JAVA_WORK SHARETX_LISTEN_BROKER_PORT_BASE=0 ${data[@]+"${data[@]}"} "$@" "$WORK/sharetx" ${up[@]+"${up[@]}"} --bootstrap "$bs" --metrics "$met" \
    >"$WORK/proxy-$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  deadline=$((SECONDS + 90))
  until curl -sf "http://$met/readyz" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then log "proxy $name exited:"; tail -30 "$WORK/proxy-$name.log" >&2; exit 1; fi
    if [ $SECONDS -ge $deadline ]; then log "proxy $name not ready after 90 s:"; tail -30 "$WORK/proxy-$name.log" >&2; exit 1; fi
    sleep 0.3
  done
  log "proxy $name pid $pid at $bs (metrics $met) in front of $upstream, ready at $((SECONDS - t0)) s; log $WORK/proxy-$name.log"
  printf -v "${name}_BS" '%s' "$bs"
  printf -v "${name}_PID" '%s' "$pid"
  METS+=("$name=$met")
}
METS=()

start_proxy plain "$SEEDS"
# The cluster's own address, for the test that calls it without a sidecar (none when embedded).
kafka_BS=$SEEDS
[ "$SEEDS" = embedded ] && kafka_BS=
sasl_BS=
if [ -n "${SASL_SEEDS:-}" ]; then
  # The proxy's own principal on the SASL listener (kafka.sh's test user); clients authenticate as themselves.
  start_proxy sasl "$SASL_SEEDS" SHARETX_UPSTREAM_SASL_MECHANISM=SCRAM-SHA-256 SHARETX_UPSTREAM_SASL_USERNAME=sharetx \
    SHARETX_UPSTREAM_SASL_PASSWORD=sharetx-secret
fi

# TLS on the client side: proxies whose listeners speak TLS (a self-signed certificate for
# 127.0.0.1 made here), one in front of the plain listener (security.protocol SSL) and, with
# SASL_SEEDS, one in front of the SASL listener (SASL_SSL): the library's own connections must
# speak what the producer's configuration says.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
  -keyout "$WORK/tls-key.pem" -out "$WORK/tls-cert.pem" >/dev/null 2>&1
tls_env=(SHARETX_LISTEN_TLS_ENABLED=true SHARETX_LISTEN_TLS_CERT_FILE="$WORK/tls-cert.pem" SHARETX_LISTEN_TLS_KEY_FILE="$WORK/tls-key.pem")
start_proxy tls "$SEEDS" "${tls_env[@]}"
sasltls_BS=
if [ -n "${SASL_SEEDS:-}" ]; then
  start_proxy sasltls "$SASL_SEEDS" "${tls_env[@]}" SHARETX_UPSTREAM_SASL_MECHANISM=SCRAM-SHA-256 SHARETX_UPSTREAM_SASL_USERNAME=sharetx \
    SHARETX_UPSTREAM_SASL_PASSWORD=sharetx-secret
fi

# A proxy of its own for the time-out test, which stops it (SIGSTOP) for a while and resumes it.
start_proxy stall "$SEEDS"

offline=
[ "${MVN_OFFLINE:-0}" = 1 ] && offline=-o
# JAVA_TEST_COPY=1: build and test a copy of java/ (pom and sources) in the work directory, so
# that a build with another kafka-clients version never shares java/target with one running at the
# same time (make test runs the 4.2.2 compatibility tests beside the three-node pass).
jdir=$ROOT/java
if [ "${JAVA_TEST_COPY:-0}" = 1 ]; then
  jdir=$WORK/java
  mkdir -p "$jdir"
  cp -r "$ROOT/java/pom.xml" "$ROOT/java/src" "$jdir/"
  log "building and testing a copy of java/ in $jdir"
fi
rc=0
(cd "$jdir" && SHARETX_BOOTSTRAP=$plain_BS SHARETX_SASL_BOOTSTRAP=$sasl_BS SHARETX_KAFKA_BOOTSTRAP=$kafka_BS SHARETX_STALL_BOOTSTRAP=$stall_BS SHARETX_STALL_PID=$stall_PID \
  SHARETX_TLS_BOOTSTRAP=$tls_BS SHARETX_SASL_TLS_BOOTSTRAP=$sasltls_BS SHARETX_TLS_CA=$WORK/tls-cert.pem mvn -B $offline "$@" test) || rc=$?
if [ $rc != 0 ]; then
  log "mvn failed (rc=$rc); proxy warnings:"; grep -hE 'level=(WARN|ERROR)' "$WORK"/proxy-*.log | tail -20 >&2 || true
  # What each proxy holds and did, for a failure that left no warning (the work directory may be
  # gone by the time a CI log is read).
  for nm in "${METS[@]}"; do
    log "proxy ${nm%%=*}: its state and counters at the end"
    curl -sf "http://${nm#*=}/metrics" 2>/dev/null | grep -E '^sharetx_(tx_pending_records|ledger_entries|share_sessions|staged_calls_open|redelivered_records_total|txn_share_acknowledge_total|staging_failures_total|markers_total|upstream_ack_failures_total|client_acks_absorbed_total|share_session_wait_seconds_count|connections_closed_total)' >&2 || true
  done
fi
log "done in $((SECONDS - t0)) s (rc=$rc)"
exit $rc
