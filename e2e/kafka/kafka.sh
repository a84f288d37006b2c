#!/usr/bin/env bash
# Real Apache Kafka (KRaft, combined broker+controller nodes) for sharetx e2e tests,
# assembled from Maven Central jars with mvn. No .tgz, no Docker.
#
#   kafka.sh libs                     resolve jars into the cache (idempotent)
#   kafka.sh up                       start (or reuse) a cluster; last stdout line = PLAINTEXT bootstrap list
#   kafka.sh down                     stop all nodes (TERM, then KILL after KAFKA_STOP_TIMEOUT s)
#   kafka.sh restart-node <i>         kill -9 node i, start it again on its data, wait until ready
#   kafka.sh check                    finalized share.version>=1 and transaction.version=2, and a
#                                     SCRAM-SHA-256 login (alice) on the SASL listener works, else exit 1
#   kafka.sh status                   print the running nodes
#   kafka.sh bootstrap                print the bootstrap list of the running cluster (PLAINTEXT)
#   kafka.sh sasl-bootstrap           print the SASL_PLAINTEXT bootstrap list of the running cluster
#   kafka.sh tool <MainClass> args... run a class on the Kafka classpath (tools log config: WARN to stderr);
#                                     `tool ConfigCommand` = kafka.admin.ConfigCommand (<=4.3) or o.a.k.tools.ConfigCommand (4.4+)
#
# Env: KAFKA_VERSION (4.4.0)  KAFKA_NODES (1|3, default 1)  KAFKA_E2E_DIR (/tmp/sharetx-kafka)
#      SHARETX_CACHE ($HOME/.cache/sharetx)  KAFKA_LIBS (override the jar dir)
#      KAFKA_BASE_PORT (19092; node i: client port BASE+100*(i-1), controller port that +1,
#                       SASL_PLAINTEXT port that +5)
#      KAFKA_HEAP (-Xms512m -Xmx768m)  KAFKA_TOOL_OPTS  KAFKA_READY_TIMEOUT (180)
#      KAFKA_STOP_TIMEOUT (30)  KAFKA_FORMAT_FEATURES (transaction.version=2)
#
# Every node has two client listeners on 127.0.0.1:
#   PLAINTEXT       client port      no authentication (User:ANONYMOUS); also inter-broker traffic
#   SASL_PLAINTEXT  client port + 5  mechanisms PLAIN, SCRAM-SHA-256 and OAUTHBEARER (unsecured tokens: User:<sub>)
# Test-only users (PLAIN from the JAAS config, SCRAM-SHA-256 credentials added at format time):
#   admin/admin-secret (super user)  alice/alice-secret  bob/bob-secret  mallory/mallory-secret
#   sharetx/sharetx-secret (the proxy's own principal in tests)
# Authoriser: StandardAuthorizer, allow.everyone.if.no.acl.found=true, super.users=User:admin and
# User:ANONYMOUS: a resource without ACLs is open to every principal; a test denies a SASL user by
# adding ACLs (as admin) on its own resource names. PLAINTEXT (ANONYMOUS) is never restricted: the
# nodes' own quorum/replication traffic is ANONYMOUS, and before the metadata is loaded only super
# users are authorised (3 nodes would not elect a leader). Client configs per user and mechanism:
# $KAFKA_E2E_DIR/sasl/<user>-{plain,scram}.properties (for the Java tools' --command-config).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KAFKA_VERSION=${KAFKA_VERSION:-4.4.0}
KAFKA_NODES=${KAFKA_NODES:-1}
CACHE=${SHARETX_CACHE:-$HOME/.cache/sharetx}
LIBS=${KAFKA_LIBS:-$CACHE/kafka-libs-$KAFKA_VERSION}
E2E_DIR=${KAFKA_E2E_DIR:-/tmp/sharetx-kafka}
BASE_PORT=${KAFKA_BASE_PORT:-19092}
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java
BROKER_HEAP=${KAFKA_HEAP:--Xms512m -Xmx768m}
# What kafka-run-class.sh uses (KAFKA_JVM_PERFORMANCE_OPTS), minus JMX and GC logging.
BROKER_JVM=${KAFKA_BROKER_JVM_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true}
# Short-lived CLI JVMs: start fast rather than run fast.
TOOL_JVM=${KAFKA_TOOL_OPTS:--Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto -Djava.awt.headless=true}
# share.version is left to the version's default (4.2/4.3: 1, 4.4: 2); transaction.version pinned.
FORMAT_FEATURES=${KAFKA_FORMAT_FEATURES-transaction.version=2}
READY_TIMEOUT=${KAFKA_READY_TIMEOUT:-180}
STOP_TIMEOUT=${KAFKA_STOP_TIMEOUT:-30}
STATE=$E2E_DIR/cluster.env
SASL_PORT_OFFSET=5   # from the client port; the controller port is client port + 1
# name:password, test-only. Changing this list makes `up` re-format a running cluster.
SASL_USERS=(admin:admin-secret alice:alice-secret bob:bob-secret mallory:mallory-secret sharetx:sharetx-secret)
# Fingerprint of what a node is formatted and configured with (template + users): `up` reuses a
# running cluster only if it matches, so a cluster from an older kafka.sh or template is re-formatted.
config_sha() { { cat "$HERE/server.properties"; printf '%s\n' "${SASL_USERS[@]}"; } | sha256sum | cut -c1-16; }
STARTED_RE='Kafka Server started'

log() { echo "[kafka.sh] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

case "$KAFKA_NODES" in 1|3) ;; *) die "KAFKA_NODES must be 1 or 3 (got $KAFKA_NODES)";; esac

# ------------------------------------------------------------------ jars
libs() {
  [ -f "$LIBS/.complete" ] && return 0
  command -v mvn >/dev/null || die "mvn not found"
  mkdir -p "$CACHE"
  # one resolver at a time per cache (concurrent test runs)
  exec 9>"$CACHE/.kafka-libs-$KAFKA_VERSION.lock"
  flock -w 900 9 || die "timeout waiting for $CACHE/.kafka-libs-$KAFKA_VERSION.lock"
  if [ -f "$LIBS/.complete" ]; then exec 9>&-; return 0; fi
  local t0=$SECONDS build="$CACHE/kafka-build-$KAFKA_VERSION" tmp="$LIBS.tmp.$$"
  log "resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION + kafka-tools + log4j2 with mvn into $LIBS"
  rm -rf "$build" "$tmp"; mkdir -p "$build"
  cp "$HERE/pom.xml" "$build/pom.xml"    # build outside the source tree (mvn writes target/)
  if ! mvn -B -ntp -f "$build/pom.xml" -Dkafka.version="$KAFKA_VERSION" -Dkafka.libs.dir="$tmp" package 2>&1 |
       sed -u -n -e 's/^\[INFO\] Copying \(.*\) to .*/[mvn] \1/p' -e '/ERROR\|BUILD/s/^/[mvn] /p' >&2; then
    die "mvn failed (is $KAFKA_VERSION on Maven Central?)"
  fi
  [ -d "$tmp" ] || die "mvn produced no $tmp"
  local f
  for f in "kafka_2.13-$KAFKA_VERSION.jar" "kafka-tools-$KAFKA_VERSION.jar" "kafka-clients-$KAFKA_VERSION.jar"; do
    [ -f "$tmp/$f" ] || die "missing $f after mvn"
  done
  ls "$tmp"/log4j-core-*.jar "$tmp"/log4j-slf4j-impl-*.jar "$tmp"/slf4j-api-*.jar >/dev/null || die "logging jars missing"
  local bad
  bad=$(ls "$tmp" | grep -E '^(log4j-slf4j2-impl|slf4j-reload4j|slf4j-log4j12|slf4j-simple|slf4j-nop|logback-classic)-' || true)
  [ -z "$bad" ] || die "extra SLF4J binding(s) on classpath: $bad"
  touch "$tmp/.complete"
  rm -rf "$LIBS"; mv "$tmp" "$LIBS"; rm -rf "$build"
  exec 9>&-
  log "libs ready: $(ls "$LIBS" | grep -c '\.jar$') jars in $LIBS ($((SECONDS - t0))s)"
}

tool() {  # = bin/kafka-run-class.sh with the tools log config
  libs
  # shellcheck disable=SC2086
  exec "$JAVA" $TOOL_JVM -Dlog4j2.configurationFile="$HERE/log4j2-tools.properties" -cp "$LIBS/*" "$@"
}
run_tool() { ( tool "$@" ); }   # same, as a subshell (for use inside this script)

# ConfigCommand moved from kafka.admin (kafka_2.13, <= 4.3) to org.apache.kafka.tools (4.4+).
# `tool ConfigCommand ...` picks the one this version has (jar names are stored uncompressed).
resolve_main() {
  case "$1" in
    ConfigCommand)
      if grep -qa 'org/apache/kafka/tools/ConfigCommand.class' "$LIBS/kafka-tools-$KAFKA_VERSION.jar" 2>/dev/null; then
        echo org.apache.kafka.tools.ConfigCommand
      else
        echo kafka.admin.ConfigCommand
      fi ;;
    *) echo "$1" ;;
  esac
}

# ------------------------------------------------------------------ helpers
node_dir()  { echo "$E2E_DIR/node$1"; }
node_port() { echo $((BASE_PORT + 100 * ($1 - 1))); }
sasl_port() { echo $(($(node_port "$1") + SASL_PORT_OFFSET)); }
bootstrap_for() {  # bootstrap_for <nodes>
  local i bs=""
  for ((i = 1; i <= $1; i++)); do bs+="${bs:+,}127.0.0.1:$(node_port "$i")"; done
  echo "$bs"
}
sasl_bootstrap_for() {  # sasl_bootstrap_for <nodes>
  local i bs=""
  for ((i = 1; i <= $1; i++)); do bs+="${bs:+,}127.0.0.1:$(sasl_port "$i")"; done
  echo "$bs"
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

node_pid() {  # prints the pid of node i if it is alive and really our broker
  local d pid
  d=$(node_dir "$1")
  [ -f "$d/pid" ] || return 1
  pid=$(cat "$d/pid")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "kafka.Kafka $d/server.properties" || return 1
  echo "$pid"
}

load_state() {  # sets RUN_VERSION RUN_NODES RUN_BOOTSTRAP RUN_SASL_BOOTSTRAP RUN_CONFIG RUN_LIBS; fails if no state file
  [ -f "$STATE" ] || return 1
  RUN_SASL_BOOTSTRAP="" RUN_CONFIG=""   # absent from state files written before the SASL listener
  # shellcheck disable=SC1090
  . "$STATE"
}

all_alive() {  # all_alive <nodes>
  local i
  for ((i = 1; i <= $1; i++)); do node_pid "$i" >/dev/null || return 1; done
}

# ------------------------------------------------------------------ node lifecycle
write_props() {  # write_props <i> <nodes> <voters>
  local i=$1 n=$2 voters=$3 d bp cp sp rf isr u plain=""
  d=$(node_dir "$i"); bp=$(node_port "$i"); cp=$((bp + 1)); sp=$(sasl_port "$i")
  if [ "$n" -ge 3 ]; then rf=3; isr=2; else rf=1; isr=1; fi
  for u in "${SASL_USERS[@]}"; do plain+="${plain:+ }user_${u%%:*}=\"${u#*:}\""; done
  mkdir -p "$d/data" "$d/logs"
  sed -e "s#@NODE_ID@#$i#g" -e "s#@VOTERS@#$voters#g" \
      -e "s#@BROKER_PORT@#$bp#g" -e "s#@CONTROLLER_PORT@#$cp#g" -e "s#@SASL_PORT@#$sp#g" \
      -e "s#@PLAIN_USERS@#$plain#g" -e "s#@DATA_DIR@#$d/data#g" \
      -e "s#@RF@#$rf#g" -e "s#@MIN_ISR@#$isr#g" \
      "$HERE/server.properties" >"$d/server.properties"
}

write_client_configs() {  # $E2E_DIR/sasl/<user>-{plain,scram}.properties, for --command-config
  local u name pw
  rm -rf "$E2E_DIR/sasl"; mkdir -p "$E2E_DIR/sasl"
  for u in "${SASL_USERS[@]}"; do
    name=${u%%:*}; pw=${u#*:}
    printf '%s\n' "security.protocol=SASL_PLAINTEXT" "sasl.mechanism=PLAIN" \
      "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"$name\" password=\"$pw\";" \
      >"$E2E_DIR/sasl/$name-plain.properties"
    printf '%s\n' "security.protocol=SASL_PLAINTEXT" "sasl.mechanism=SCRAM-SHA-256" \
      "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$name\" password=\"$pw\";" \
      >"$E2E_DIR/sasl/$name-scram.properties"
  done
}

format_node() {  # format_node <i> <cluster id>
  local d f u feat=() scram=()
  d=$(node_dir "$1")
  for f in $FORMAT_FEATURES; do feat+=(--feature "$f"); done
  # SCRAM credentials go into the bootstrap metadata (same on every node; the leader's is used).
  for u in "${SASL_USERS[@]}"; do scram+=(--add-scram "SCRAM-SHA-256=[name=${u%%:*},password=${u#*:}]"); done
  # No --release-version: defaults to this build's latest production metadata.version.
  # Same jars as the broker: formatted dirs are not forward compatible.
  run_tool kafka.tools.StorageTool format --cluster-id "$2" --config "$d/server.properties" \
    ${feat[@]+"${feat[@]}"} "${scram[@]}" \
    >"$d/logs/format.log" 2>&1 || { cat "$d/logs/format.log" >&2; die "format of node $1 failed"; }
}

start_node() {  # start_node <i>   (= bin/kafka-server-start.sh, in the background)
  local d deadline; d=$(node_dir "$1")
  rm -f "$d/pid"
  # Own session (setsid) and no inherited stdio: a caller that kills its process group or waits
  # for its pipes to close (go test, timeout) neither kills nor waits for the brokers.
  # shellcheck disable=SC2016,SC2086
  setsid bash -c 'echo $$ >"$1/pid"; shift; exec "$@"' _ "$d" \
    "$JAVA" $BROKER_HEAP $BROKER_JVM \
    -Dlog4j2.configurationFile="$HERE/log4j2-broker.properties" -Dkafka.logs.dir="$d/logs" \
    -cp "$LIBS/*" kafka.Kafka "$d/server.properties" >>"$d/logs/stdout.log" 2>&1 </dev/null &
  deadline=$((SECONDS + 10))
  until [ -s "$d/pid" ]; do [ "$SECONDS" -lt "$deadline" ] || die "node $1: no pid file"; sleep 0.1; done
}

started_count() { grep -c "$STARTED_RE" "$(node_dir "$1")/logs/server.log" 2>/dev/null || true; }

wait_started() {  # wait_started <i> <previous started_count>
  local i=$1 before=${2:-0} d port deadline=$((SECONDS + READY_TIMEOUT)) c
  d=$(node_dir "$i"); port=$(node_port "$i")
  while :; do
    c=$(started_count "$i"); c=${c:-0}
    if [ "$c" -gt "$before" ] && port_open "$port" && port_open "$(sasl_port "$i")"; then break; fi
    if ! node_pid "$i" >/dev/null; then
      log "node $i exited during start-up:"; tail -30 "$d/logs/stdout.log" >&2; tail -30 "$d/logs/server.log" >&2 || true
      return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then log "node $i not started after ${READY_TIMEOUT}s:"; tail -30 "$d/logs/server.log" >&2; return 1; fi
    sleep 0.5
  done
  log "node $i started (127.0.0.1:$port, SASL 127.0.0.1:$(sasl_port "$i"))"
}

wait_answers() {  # wait_answers <bootstrap>: the cluster serves admin requests (DescribeFeatures)
  local bs=$1 deadline=$((SECONDS + READY_TIMEOUT)) out
  while :; do
    if out=$(run_tool org.apache.kafka.tools.FeatureCommand --bootstrap-server "$bs" describe 2>&1) && grep -q 'Feature: metadata.version' <<<"$out"; then
      return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then log "cluster at $bs does not answer:"; echo "$out" | tail -20 >&2; return 1; fi
    sleep 1
  done
}

wait_no_urp() {  # wait_no_urp <bootstrap>: no under-replicated partitions (only meaningful with 3 nodes)
  local bs=$1 deadline=$((SECONDS + READY_TIMEOUT)) out
  while :; do
    if out=$(run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bs" --describe --under-replicated-partitions 2>&1) &&
       [ -z "$(grep -v '^\s*$' <<<"$out")" ]; then
      return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then log "under-replicated partitions remain:"; echo "$out" | tail -20 >&2; return 1; fi
    sleep 1
  done
}

# ------------------------------------------------------------------ commands
up() {
  local want_bs want_sasl want_cfg i voters="" cid t0=$SECONDS
  want_bs=$(bootstrap_for "$KAFKA_NODES"); want_sasl=$(sasl_bootstrap_for "$KAFKA_NODES"); want_cfg=$(config_sha)
  if load_state; then
    # Not reused: a cluster from an older kafka.sh (no SASL listener / config fingerprint in its
    # state file), or one formatted from another template or user list.
    if [ "$RUN_VERSION" = "$KAFKA_VERSION" ] && [ "$RUN_NODES" = "$KAFKA_NODES" ] &&
       [ "$RUN_SASL_BOOTSTRAP" = "$want_sasl" ] && [ "$RUN_CONFIG" = "$want_cfg" ] &&
       all_alive "$RUN_NODES"; then
      local ok=1
      for ((i = 1; i <= RUN_NODES; i++)); do port_open "$(node_port "$i")" && port_open "$(sasl_port "$i")" || ok=0; done
      if [ $ok = 1 ]; then
        [ -f "$E2E_DIR/sasl/admin-scram.properties" ] || write_client_configs
        log "reusing running Kafka $RUN_VERSION x$RUN_NODES (SASL $RUN_SASL_BOOTSTRAP)"
        echo "$RUN_BOOTSTRAP"; return 0
      fi
    fi
    log "a different, older or broken cluster (Kafka ${RUN_VERSION:-?} x${RUN_NODES:-?}, SASL ${RUN_SASL_BOOTSTRAP:-none}, config ${RUN_CONFIG:-none}) is registered: stopping it"
    down
  fi
  local p
  for ((i = 1; i <= KAFKA_NODES; i++)); do
    for p in "$(node_port "$i")" $(($(node_port "$i") + 1)) "$(sasl_port "$i")"; do
      if port_open "$p"; then die "port $p (node $i) is in use by a process this script does not know about"; fi
    done
  done
  libs
  rm -rf "$E2E_DIR"/node* "$E2E_DIR"/java-clients-* "$E2E_DIR/sasl"; mkdir -p "$E2E_DIR"
  write_client_configs
  for ((i = 1; i <= KAFKA_NODES; i++)); do voters+="${voters:+,}$i@127.0.0.1:$(($(node_port "$i") + 1))"; done
  cid=$(new_cluster_id)     # same cluster id on every node
  log "formatting $KAFKA_NODES node(s), Kafka $KAFKA_VERSION, cluster id $cid, data in $E2E_DIR"
  for ((i = 1; i <= KAFKA_NODES; i++)); do write_props "$i" "$KAFKA_NODES" "$voters"; done
  for ((i = 1; i <= KAFKA_NODES; i++)); do format_node "$i" "$cid" & done
  wait_all_bg || die "format failed"
  for ((i = 1; i <= KAFKA_NODES; i++)); do start_node "$i"; done   # all at once: quorum needs a majority
  cat >"$STATE" <<EOF
RUN_VERSION=$KAFKA_VERSION
RUN_NODES=$KAFKA_NODES
RUN_BOOTSTRAP=$want_bs
RUN_SASL_BOOTSTRAP=$want_sasl
RUN_CONFIG=$want_cfg
RUN_LIBS=$LIBS
RUN_CLUSTER_ID=$cid
EOF
  for ((i = 1; i <= KAFKA_NODES; i++)); do wait_started "$i" 0 || { down; die "start failed"; }; done
  wait_answers "$want_bs" || { down; die "cluster does not answer"; }
  log "Kafka $KAFKA_VERSION x$KAFKA_NODES ready in $((SECONDS - t0))s (SASL_PLAINTEXT $want_sasl)"
  echo "$want_bs"
}

wait_all_bg() { local rc=0 p; for p in $(jobs -p); do wait "$p" || rc=1; done; return $rc; }

new_cluster_id() {  # what `kafka-storage random-uuid` prints: 16 random bytes, base64url, unpadded
  local id
  while :; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    [ "${id:0:1}" != "-" ] && [ "${#id}" = 22 ] && break   # a leading '-' would parse as an option
  done
  echo "$id"
}

down() {
  local d p pid pids=() deadline
  for p in "$E2E_DIR"/node*/pid; do
    [ -f "$p" ] || continue
    d=$(dirname "$p"); pid=$(cat "$p")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
       tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "kafka.Kafka $d/server.properties"; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  deadline=$((SECONDS + STOP_TIMEOUT))
  for pid in ${pids[@]+"${pids[@]}"}; do
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.3; done
    if kill -0 "$pid" 2>/dev/null; then
      log "pid $pid still alive after ${STOP_TIMEOUT}s: KILL"   # e.g. a broker that lost its quorum
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  for pid in ${pids[@]+"${pids[@]}"}; do while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done; done
  rm -f "$E2E_DIR"/node*/pid "$STATE"
  log "stopped ${#pids[@]} node(s)"
}

restart_node() {
  local i=${1:-} pid before t0=$SECONDS
  load_state || die "no cluster registered in $E2E_DIR"
  [[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -ge 1 ] && [ "$i" -le "$RUN_NODES" ] || die "usage: restart-node <1..$RUN_NODES>"
  LIBS=$RUN_LIBS
  if pid=$(node_pid "$i"); then
    kill -KILL "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    log "node $i (pid $pid) killed"
  else
    log "node $i was not running"
  fi
  before=$(started_count "$i"); before=${before:-0}
  start_node "$i"
  wait_started "$i" "$before" || die "node $i did not come back"
  wait_answers "127.0.0.1:$(node_port "$i")" || die "node $i does not answer"
  port_open "$(sasl_port "$i")" || die "node $i: SASL port $(sasl_port "$i") is not listening"
  if [ "$RUN_NODES" -gt 1 ]; then wait_no_urp "$RUN_BOOTSTRAP" || die "cluster did not catch up"; fi
  log "node $i back in $((SECONDS - t0))s"
}

check() {
  local bs sbs out
  if load_state; then
    bs=$RUN_BOOTSTRAP; sbs=$RUN_SASL_BOOTSTRAP; LIBS=$RUN_LIBS
  else
    bs=$(bootstrap_for "$KAFKA_NODES"); sbs=$(sasl_bootstrap_for "$KAFKA_NODES")
  fi
  bs=${KAFKA_BOOTSTRAP:-$bs}
  out=$(run_tool org.apache.kafka.tools.FeatureCommand --bootstrap-server "$bs" describe) || die "FeatureCommand failed against $bs"
  echo "$out"
  grep -Eq 'Feature: share\.version.*FinalizedVersionLevel: [1-9]' <<<"$out" || die "share.version is not finalized >= 1"
  grep -Eq 'Feature: transaction\.version.*FinalizedVersionLevel: 2' <<<"$out" || die "transaction.version is not finalized = 2"
  if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
    [ -n "$sbs" ] || die "the registered cluster has no SASL listener (started by an older kafka.sh): run up"
    [ -f "$E2E_DIR/sasl/alice-scram.properties" ] || write_client_configs
    if ! out=$(run_tool org.apache.kafka.tools.FeatureCommand --bootstrap-server "$sbs" \
               --command-config "$E2E_DIR/sasl/alice-scram.properties" describe 2>&1) ||
       ! grep -q 'Feature: metadata.version' <<<"$out"; then
      echo "$out" | tail -20 >&2; die "SCRAM-SHA-256 login as alice on $sbs failed"
    fi
    log "check OK ($bs; SASL SCRAM-SHA-256 as alice on $sbs)"
  else
    log "check OK ($bs)"
  fi
}

status() {
  local i pid
  if ! load_state; then echo "no cluster (state dir $E2E_DIR)"; return 1; fi
  echo "Kafka $RUN_VERSION x$RUN_NODES cluster_id=$RUN_CLUSTER_ID bootstrap=$RUN_BOOTSTRAP sasl_bootstrap=${RUN_SASL_BOOTSTRAP:-none} dir=$E2E_DIR"
  local rc=0
  for ((i = 1; i <= RUN_NODES; i++)); do
    if pid=$(node_pid "$i"); then
      echo "node $i pid=$pid port=$(node_port "$i") controller=$(($(node_port "$i") + 1)) sasl=$(sasl_port "$i") $(port_open "$(node_port "$i")" && echo listening || echo not-listening)"
    else
      echo "node $i DOWN port=$(node_port "$i")"; rc=1
    fi
  done
  return $rc
}

cmd=${1:-}; shift || true
case "$cmd" in
  libs) libs ;;
  up) up ;;
  down) down ;;
  restart-node) restart_node "$@" ;;
  check) check ;;
  status) status ;;
  bootstrap) load_state || die "no cluster"; echo "$RUN_BOOTSTRAP" ;;
  sasl-bootstrap)
    load_state || die "no cluster"
    [ -n "$RUN_SASL_BOOTSTRAP" ] || die "the running cluster has no SASL listener (started by an older kafka.sh): run up"
    echo "$RUN_SASL_BOOTSTRAP" ;;
  tool)
    [ $# -ge 1 ] || die "usage: tool <MainClass> args..."
    libs; main=$(resolve_main "$1"); shift
    tool "$main" "$@" ;;
  *) sed -n '/^set -euo/q;2,$p' "$0"; exit 2 ;;
esac
