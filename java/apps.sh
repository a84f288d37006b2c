#!/usr/bin/env bash
# java/apps.sh: builds the Java library and the Java applications of this repository, and prints the
# classpath to run them with (one line on stdout; progress on stderr):
#
#   java -cp "$(java/apps.sh)" io.sharetx.examples.ConsumeTransformProduce ...
#
# The applications are every .java file under java/examples/, e2e/chaos/java/, e2e/bench/java/ and
# examples/demo/java/, compiled by Maven (java/apps/pom.xml: with the library's sources, against
# kafka-clients KAFKA_CLIENTS_VERSION, default the pom's) into java/target/apps[-<version>]. Maven
# downloads what its cache lacks the first time (MVN_OFFLINE=1 forbids that) and recompiles only
# what changed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
J=$ROOT/java
offline=()
[ "${MVN_OFFLINE:-0}" = 1 ] && offline=(-o)
version=()
[ -n "${KAFKA_CLIENTS_VERSION:-}" ] && version=(-Dkafka.version="$KAFKA_CLIENTS_VERSION")
# One build at a time (Go tests of several packages may call this at once): the builds share
# java/target.
mkdir -p "$J/target"
if command -v flock >/dev/null; then
  exec 9>"$J/target/.apps.lock"
  flock 9
fi
apps=$J/target/apps${KAFKA_CLIENTS_VERSION:+-$KAFKA_CLIENTS_VERSION}
deps=$apps.classpath
# compile: the library's and the applications' classes; build-classpath: kafka-clients and what it
# needs, written to $deps.
if ! out=$(cd "$J/apps" && mvn -B -q ${offline[@]+"${offline[@]}"} ${version[@]+"${version[@]}"} -Dapps.build.dir="$apps" \
  compile dependency:build-classpath -Dmdep.outputFile="$deps" 2>&1); then
  echo "java/apps.sh: mvn failed:" >&2
  echo "$out" | tail -30 >&2
  exit 1
fi
echo "$apps/classes:$(cat "$deps")"
