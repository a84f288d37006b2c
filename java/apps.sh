#!/usr/bin/env bash
# java/apps.sh: builds the Java library and the Java applications of this repository, and prints the
# classpath to run them with (one line on stdout; progress on stderr):
#
#   java -cp "$(java/apps.sh)" io.sharetx.examples.ConsumeTransformProduce ...
#
# The applications are every .java file under java/examples/, e2e/chaos/java/, e2e/bench/java/ and
# examples/demo/java/, compiled with javac into java/target/apps against the library's classes and
# kafka-clients (KAFKA_CLIENTS_VERSION, default the pom's). Maven downloads what its cache lacks the
# first time (MVN_OFFLINE=1 forbids that) and nothing after.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
J=$ROOT/java
offline=()
[ "${MVN_OFFLINE:-0}" = 1 ] && offline=(-o)
version=()
[ -n "${KAFKA_CLIENTS_VERSION:-}" ] && version=(-Dkafka.version="$KAFKA_CLIENTS_VERSION")
deps=$J/target/apps-classpath${KAFKA_CLIENTS_VERSION:+-$KAFKA_CLIENTS_VERSION}.txt
# One build at a time (Go tests of several packages may call this at once): mvn and javac share
# java/target.
mkdir -p "$J/target"
if command -v flock >/dev/null; then
  exec 9>"$J/target/.apps.lock"
  flock 9
fi
# compile: the library's classes; build-classpath: kafka-clients and what it needs (all of scope
# provided for this project: no JUnit), written to $deps.
if ! out=$(cd "$J" && mvn -B -q ${offline[@]+"${offline[@]}"} ${version[@]+"${version[@]}"} compile dependency:build-classpath \
  -DincludeScope=provided -Dmdep.outputFile="$deps" 2>&1); then
  echo "java/apps.sh: mvn failed:" >&2
  echo "$out" | tail -30 >&2
  exit 1
fi
cp=$J/target/classes:$(cat "$deps")
apps=$J/target/apps${KAFKA_CLIENTS_VERSION:+-$KAFKA_CLIENTS_VERSION}
mapfile -t srcs < <(find "$J/examples" "$ROOT/e2e/chaos/java" "$ROOT/e2e/bench/java" "$ROOT/examples/demo/java" -name '*.java' 2>/dev/null | sort)
if [ ${#srcs[@]} -gt 0 ]; then
  # Recompile only when a source or the library is newer than the last build.
  stamp=$apps/.built
  if [ ! -f "$stamp" ] || [ -n "$(find "${srcs[@]}" "$J/target/classes" -newer "$stamp" -print -quit)" ]; then
    rm -rf "$apps" && mkdir -p "$apps"
    javac -Xlint:all,-serial,-processing -Werror --release 17 -d "$apps" -cp "$cp" "${srcs[@]}" >&2
    touch "$stamp"
  fi
fi
echo "$apps:$cp"
