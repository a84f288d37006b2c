#!/usr/bin/env bash
# Drive Apache Kafka's own Java clients/tools against BOOTSTRAP (a real broker, or the sharetx proxy)
# and print one machine-readable line per check on stdout:
#   RESULT <check> ... ok|FAIL
# then `RESULT summary ok|FAIL checks=N failed=M elapsed=Ss`. Exit 0 only if every check passed.
#
#   java-clients.sh BOOTSTRAP [SUFFIX]
#
# Env: KAFKA_VERSION (client/tool jars, default 4.4.0; see kafka.sh)   JC_RECORDS (20000)
#      JC_RECORD_SIZE (unset: values are the integers 0..N-1 (--payload-monotonic), so consumers check
#        the exact set of values; set it for fixed-size random payloads, then only counts are checked)
#      JC_SUFFIX (unique per run: topic/group/txn-id suffix; default time-pid)
#      JC_STEP_TIMEOUT (120 s per step)  JC_IDLE_MS (5000: consumers stop after this much silence)
#      JC_RANDOM_ABORTS (1: the copier aborts ~1/3 of its transactions and retries them)
#      JC_SHARE_PERF (1: also run ShareConsumerPerformance on a second share group)
#      JC_LOG_DIR (tool logs; default ${KAFKA_E2E_DIR:-/tmp/sharetx-kafka}/java-clients-SUFFIX)
#
# Topics (created --if-not-exists, RF = broker default):
#   jc-plain-S  3 partitions  <- ProducerPerformance (idempotent, acks=all) -> share group jc-share-S
#   jc-txn-S    1 partition   <- ProducerPerformance (transactional)        -> TransactionalMessageCopier
#   jc-out-S    1 partition   <- TransactionalMessageCopier                 -> ConsoleConsumer read_committed
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
K="$HERE/kafka.sh"
BS=${1:?usage: java-clients.sh BOOTSTRAP [SUFFIX]}
S=${2:-${JC_SUFFIX:-$(date +%s)-$$}}
N=${JC_RECORDS:-20000}
SIZE=${JC_RECORD_SIZE:-}
STEP_TIMEOUT=${JC_STEP_TIMEOUT:-120}
IDLE_MS=${JC_IDLE_MS:-5000}
RANDOM_ABORTS=${JC_RANDOM_ABORTS:-1}
SHARE_PERF=${JC_SHARE_PERF:-1}
LOGS=${JC_LOG_DIR:-${KAFKA_E2E_DIR:-/tmp/sharetx-kafka}/java-clients-$S}
PLAIN=jc-plain-$S TXN=jc-txn-$S OUT=jc-out-$S GROUP=jc-share-$S
mkdir -p "$LOGS"

T0=$SECONDS CHECKS=0 FAILED=0
log() { echo "[java-clients] $*" >&2; }
result() {  # result <check> <ok:0|1> <details...>
  local name=$1 good=$2; shift 2
  CHECKS=$((CHECKS + 1))
  if [ "$good" = 1 ]; then echo "RESULT $name $* ok"; else echo "RESULT $name $* FAIL"; FAILED=$((FAILED + 1)); fi
}
# step <name> <cmd...>: run with a hard time limit, stdout -> $LOGS/<name>.out, stderr -> $LOGS/<name>.err
step() {
  local name=$1 t=$SECONDS rc=0; shift
  [ "$1" = tool ] && { shift; set -- "$K" tool "$@"; }
  timeout -k 10 "$STEP_TIMEOUT" "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err" || rc=$?
  log "$name: rc=$rc $((SECONDS - t))s"
  if [ $rc != 0 ]; then
    [ $rc = 124 ] && log "$name: TIMEOUT after ${STEP_TIMEOUT}s"
    tail -5 "$LOGS/$name.err" | sed "s/^/[java-clients]   $name: /" >&2
  fi
  return $rc
}

"$K" libs
log "bootstrap=$BS suffix=$S records=$N kafka-clients=${KAFKA_VERSION:-4.4.0} logs=$LOGS"

finish() {
  if [ $FAILED = 0 ]; then s=ok; else s=FAIL; fi
  echo "RESULT summary $s checks=$CHECKS failed=$FAILED elapsed=$((SECONDS - T0))s"
  [ $FAILED = 0 ]; exit
}

# ---- reachability: fail fast instead of letting every client time out
reach=0
for hp in ${BS//,/ }; do
  (exec 3<>"/dev/tcp/${hp%:*}/${hp##*:}") 2>/dev/null && { reach=1; break; }
done
result connect $reach "bootstrap=$BS"
[ $reach = 1 ] || finish

# ---- topics
ok=1
step topic-plain tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BS" --create --if-not-exists --topic "$PLAIN" --partitions 3 || ok=0
step topic-txn tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BS" --create --if-not-exists --topic "$TXN" --partitions 1 || ok=0
step topic-out tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BS" --create --if-not-exists --topic "$OUT" --partitions 1 || ok=0
result create-topics $ok "topics=$PLAIN,$TXN,$OUT"
[ $ok = 1 ] || finish    # everything below needs the topics

if [ -n "$SIZE" ]; then payload=(--record-size "$SIZE"); else payload=(--payload-monotonic); fi
# values_ok <file>: with monotonic payloads the values (last tab field) must be exactly 0..N-1, each once
values_ok() {
  [ -n "$SIZE" ] && return 0
  awk -F'\t' -v n="$N" '/^(Partition|Offset):/ { v = $NF; if (v !~ /^[0-9]+$/ || v >= n || seen[v]++) bad++; c++ }
    END { exit !(c == n && bad == 0) }' "$1"
}

# ---- producers. ProducerPerformance's summary line "N records sent, ..." counts only acknowledged sends.
sent() { { grep -E '^[0-9]+ records sent' "$LOGS/$1.out" || true; } | tail -1 | awk '{print $1}'; }
rc=0
step produce tool org.apache.kafka.tools.ProducerPerformance --topic "$PLAIN" --num-records "$N" "${payload[@]}" \
  --throughput -1 --bootstrap-server "$BS" --command-property acks=all client.id="jc-producer-$S" || rc=$?
n=$(sent produce); result produce "$([ $rc = 0 ] && [ "${n:-}" = "$N" ] && echo 1 || echo 0)" "records=${n:-0} expected=$N"

rc=0
step txn-produce tool org.apache.kafka.tools.ProducerPerformance --topic "$TXN" --num-records "$N" "${payload[@]}" \
  --throughput -1 --transactional-id "jc-txn-producer-$S" --transaction-duration-ms 200 \
  --bootstrap-server "$BS" --command-property client.id="jc-txn-producer-$S" || rc=$?
n=$(sent txn-produce); result txn-produce "$([ $rc = 0 ] && [ "${n:-}" = "$N" ] && echo 1 || echo 0)" "records=${n:-0} expected=$N"

# ---- share group: start at earliest (default is latest), then consume everything once
rc=0
step share-config tool ConfigCommand --bootstrap-server "$BS" --entity-type groups --entity-name "$GROUP" \
  --alter --add-config share.auto.offset.reset=earliest || rc=$?
result share-config "$([ $rc = 0 ] && echo 1 || echo 0)" "group=$GROUP share.auto.offset.reset=earliest"

rc=0
step share-consume tool org.apache.kafka.tools.consumer.ConsoleShareConsumer --bootstrap-server "$BS" --topic "$PLAIN" \
  --group "$GROUP" --max-messages "$N" --timeout-ms "$((IDLE_MS * 2))" \
  --formatter-property print.partition=true --formatter-property print.offset=true || rc=$?
# rc != 0 with a short count means the idle timeout hit; count is what matters
n=$(grep -c '^Partition:' "$LOGS/share-consume.out" || true)
u=$({ grep '^Partition:' "$LOGS/share-consume.out" || true; } | cut -f1,2 | sort -u | wc -l)
v=0; values_ok "$LOGS/share-consume.out" && v=1
result share-consume "$([ "$n" = "$N" ] && [ "$u" = "$N" ] && [ $v = 1 ] && echo 1 || echo 0)" "records=$n unique_offsets=$u values_ok=$v expected=$N group=$GROUP"

rc=0
step share-describe tool org.apache.kafka.tools.consumer.group.ShareGroupCommand --bootstrap-server "$BS" \
  --describe --group "$GROUP" || rc=$?
sed -e '/^\s*$/d' -e 's/^/DESCRIBE /' "$LOGS/share-describe.out"
# everything was consumed and acknowledged: total LAG 0. (START-OFFSET may stay behind the end
# offset on a real broker even then; only LAG is asserted.)
lag=$(awk '/^GROUP/ {for (i = 1; i <= NF; i++) if ($i == "LAG") c = i; next} c && NF >= c {s += $c} END {print c ? s : "n/a"}' "$LOGS/share-describe.out")
result share-describe "$([ $rc = 0 ] && grep -q "$PLAIN" "$LOGS/share-describe.out" && { [ "$lag" = 0 ] || [ "$lag" = n/a ]; } && echo 1 || echo 0)" "group=$GROUP lag=$lag"

if [ "$SHARE_PERF" = 1 ]; then
  rc=0
  step share-perf-config tool ConfigCommand --bootstrap-server "$BS" --entity-type groups --entity-name "$GROUP-perf" \
    --alter --add-config share.auto.offset.reset=earliest || rc=$?
  step share-perf tool org.apache.kafka.tools.ShareConsumerPerformance --bootstrap-server "$BS" --topic "$PLAIN" \
    --group "$GROUP-perf" --num-records "$N" --timeout "$((IDLE_MS * 2))" || rc=$?
  # CSV: start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms
  n=$(awk -F', *' '/^start.time/ {for (i = 1; i <= NF; i++) col[$i] = i; next}
                   /^[0-9][0-9][0-9][0-9]-/ && col["data.consumed.in.nMsg"] {n = $(col["data.consumed.in.nMsg"]); r = $(col["nMsg.sec"])}
                   END {printf "%s %d", n, r}' "$LOGS/share-perf.out")
  r=${n#* }; n=${n%% *}
  result share-perf "$([ $rc = 0 ] && [ "${n:-}" = "$N" ] && echo 1 || echo 0)" "records=${n:-0} expected=$N msgs_per_sec=${r:-0}"
fi

# ---- consume-transform-produce: copier reads jc-txn (read_committed), writes jc-out in transactions
# with sendOffsetsToTransaction(groupMetadata). --max-messages N: the input's end offset also counts
# transaction markers, so without it the copier would wait for records that never come.
aborts=(); [ "$RANDOM_ABORTS" = 1 ] && aborts=(--enable-random-aborts)
rc=0
step txn-copy tool org.apache.kafka.tools.TransactionalMessageCopier --broker-list "$BS" --input-topic "$TXN" \
  --input-partition 0 --output-topic "$OUT" --transactional-id "jc-copier-$S" --consumer-group "jc-copier-$S" \
  --transaction-size 500 --max-messages "$N" --use-group-metadata "${aborts[@]}" || rc=$?
n=$({ grep -o '"totalProcessed":[0-9]*' "$LOGS/txn-copy.out" || true; } | tail -1 | cut -d: -f2)
result txn-copy "$([ $rc = 0 ] && [ "${n:-}" = "$N" ] && echo 1 || echo 0)" "records=${n:-0} expected=$N random_aborts=$RANDOM_ABORTS"

# read_committed count of the copier's output: exactly N (aborted attempts must be invisible)
step txn-verify tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$BS" --topic "$OUT" \
  --partition 0 --offset earliest --isolation-level read_committed --timeout-ms "$IDLE_MS" \
  --formatter-property print.offset=true || true
n=$(grep -c '^Offset:' "$LOGS/txn-verify.out" || true)
v=0; values_ok "$LOGS/txn-verify.out" && v=1
# last offset > N-1: aborted attempts and commit markers occupy offsets that read_committed skips
lo=$({ grep '^Offset:' "$LOGS/txn-verify.out" || true; } | tail -1 | cut -f1 | cut -d: -f2)
result txn-verify "$([ "$n" = "$N" ] && [ $v = 1 ] && echo 1 || echo 0)" "records=$n values_ok=$v expected=$N isolation=read_committed last_offset=${lo:-none}"

finish
