#!/usr/bin/env bash
# java/test-with-proxy.sh SEEDS [mvn args...]
#
# Runs the Java library's tests (unit tests and the KIP-1289 scenarios) through a sharetx proxy in
# front of the cluster at SEEDS: builds cmd/sharetx, starts it on free loopback ports, waits for
# /readyz, runs `mvn -B -o test` (plus the given args, e.g. -Dkafka.version=4.2.2) with
# SHARETX_BOOTSTRAP (the proxy) and SHARETX_KAFKA_BOOTSTRAP (the cluster) set, and stops the
# proxy it started. Exit status: mvn's. The proxy's log is kept in $SHARETX_JAVA_WORK (printed).
#
# Env: MVN_OFFLINE (1: -o; 0 lets mvn download what the cache lacks)  SHARETX_JAVA_WORK (a temp dir)
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
BS=127.0.0.1:$(free_port)
MET=127.0.0.1:$(free_port)
# Broker listeners on free ports too (clients learn them from the rewritten metadata).
SHARETX_LISTEN_BROKER_PORT_BASE=0 "$WORK/sharetx" --upstream "$SEEDS" --bootstrap "$BS" --metrics "$MET" \
  >"$WORK/proxy.log" 2>&1 &
PID=$!
stop() {
  if kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$PID" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$PID" 2>/dev/null && kill -KILL "$PID" 2>/dev/null || true
  fi
  wait "$PID" 2>/dev/null || true
}
trap stop EXIT

deadline=$((SECONDS + 90))
until curl -sf "http://$MET/readyz" >/dev/null 2>&1; do
  if ! kill -0 "$PID" 2>/dev/null; then log "the proxy exited:"; tail -30 "$WORK/proxy.log" >&2; exit 1; fi
  if [ $SECONDS -ge $deadline ]; then log "the proxy is not ready after 90 s:"; tail -30 "$WORK/proxy.log" >&2; exit 1; fi
  sleep 0.3
done
log "proxy pid $PID at $BS (metrics $MET) in front of $SEEDS, ready after $((SECONDS - t0)) s; log $WORK/proxy.log"

offline=-o
[ "${MVN_OFFLINE:-1}" = 0 ] && offline=
rc=0
(cd "$ROOT/java" && SHARETX_BOOTSTRAP=$BS SHARETX_KAFKA_BOOTSTRAP=$SEEDS mvn -B $offline "$@" test) || rc=$?
if [ $rc != 0 ]; then log "mvn failed (rc=$rc); proxy log tail:"; grep -E 'level=(WARN|ERROR)' "$WORK/proxy.log" | tail -20 >&2 || true; fi
log "done in $((SECONDS - t0)) s (rc=$rc)"
exit $rc
