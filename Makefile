# sharetx — make targets. The README's two commands: `go run ./cmd/sharetx`, `make test`.
SHELL := /bin/bash
KAFKA_VERSION ?= 4.4.0
KAFKA_NODES ?= 1
KAFKA := KAFKA_VERSION=$(KAFKA_VERSION) KAFKA_NODES=$(KAFKA_NODES) e2e/kafka/kafka.sh
GO_TEST_FLAGS ?= -count=1 -timeout 20m
FUZZTIME ?= 10s

.PHONY: soak run build test test-race e2e-on test-kfake kafka-up kafka-down kafka-status fuzz vet chaos demo demo-java bench bench-quick bench-pin test-java test-java-embedded test-java-compat test-python test-python-embedded demo-python

run:
	go run ./cmd/sharetx

build:
	CGO_ENABLED=0 go build -trimpath -o bin/sharetx ./cmd/sharetx

# staticcheck, pinned, through `go run` (the Go module proxy serves it; nothing is added to go.mod).
STATICCHECK_VERSION ?= v0.8.2
vet:
	go vet ./...
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt -w these files:"; echo "$$unformatted"; exit 1; fi
	go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Every test: unit tests, fuzz seeds, and the end-to-end suite against kfake
# AND a real Apache Kafka cluster (started here from Maven Central jars).
# Each test runs where it proves something, once:
# - the race detector over every package, every end-to-end test's kfake half
#   (E2E_HALVES=kfake), at the same time as
# - the end-to-end tests' real-broker halves that one broker proves (the
#   protocol, the KIP's semantics, authorisation: E2E_PASS=one-node) on a
#   one-node cluster;
# - the Java library's tests (JUnit) through a proxy in front of that node;
# - on three nodes, only what needs three brokers (failover, leaders on
#   several nodes, Java clients following such metadata: E2E_PASS=three-node),
#   the short chaos runs (e2e/chaos: workers and proxies killed with kill -9
#   under load, Go and Java workers, counted exactly-once) and the two-minute
#   soak, at the same time as the Java library with kafka-clients 4.2.2
#   against Kafka 4.2.2 (a one-node cluster of its own); then the three-node
#   tests of ./e2e, at the same time as the Java library through the
#   zero-config start (its embedded cluster: no Kafka). The chaos runs and
#   ./e2e's three-node tests never overlap: ./e2e's failover tests kill -9
#   and restart brokers of the cluster the chaos runs use, a fault those
#   runs neither inject nor expect (CI, once: a worker-kill phase stalled at
#   285/300 after both its workers lost their group coordinator at the same
#   moment, most likely to such a restart);
# - a short fuzz of every decoder.
# The three-node cluster is left running; `make kafka-down` stops it.
# Each part is timed (.ci/step); the table of what each took, and the wall
# clock, end the run (parts side by side overlap).
STEP := .ci/step
GO_PKGS = $$(go list ./... | tr "\n" " ")
test:
	@$(STEP) --reset
	@$(STEP) "vet, gofmt, staticcheck" $(MAKE) --no-print-directory vet
	@$(STEP) "Kafka x1 up (jars resolved once, before the passes that share them)" $(MAKE) --no-print-directory kafka-up KAFKA_NODES=1
	@$(STEP) --together \
	  "Go, race detector: every package, kfake halves" "$(MAKE) --no-print-directory test-race" \
	  "Go, Kafka x1: real-broker halves" "$(MAKE) --no-print-directory e2e-on KAFKA_NODES=1 E2E_PASS=one-node PKGS='./e2e ./e2e/bench'"
	@$(STEP) --together \
	  "Java library through a proxy (Kafka x1)" "$(MAKE) --no-print-directory test-java" \
	  "Python library: through a proxy (Kafka x1), then the zero-config start" "$(MAKE) --no-print-directory test-python test-python-embedded"
	@$(STEP) --together \
	  "Go, Kafka x3: chaos, soak" "$(MAKE) --no-print-directory e2e-on KAFKA_NODES=3 E2E_PASS=three-node PKGS='./e2e/chaos'" \
	  "Java library, kafka-clients 4.2.2 / Kafka 4.2.2" "$(MAKE) --no-print-directory test-java-compat"
	@$(STEP) --together \
	  "Go, Kafka x3: three-broker tests" "$(MAKE) --no-print-directory e2e-on KAFKA_NODES=3 E2E_PASS=three-node PKGS='./e2e'" \
	  "Java library, zero-config start" "$(MAKE) --no-print-directory test-java-embedded"
	@$(STEP) "fuzz every decoder (5 s each)" $(MAKE) --no-print-directory fuzz FUZZTIME=5s
	@$(STEP) --table

# The race detector over every package and the end-to-end tests' kfake
# halves (no real broker: their real-broker halves skip, E2E_HALVES=kfake).
# E2E_REQUIRE_KAFKA makes a test that needs Java fail rather than skip.
test-race:
	@echo "== go test -race, kfake halves: every package"
	@E2E_HALVES=kfake E2E_REQUIRE_KAFKA=1 go test -race $(GO_TEST_FLAGS) $(GO_PKGS)

PKGS ?= ./...
# E2E_PASS: one-node or three-node, the e2e tests' real halves that need that
# many brokers (e2e.SkipForPass); e2e-on runs the real-broker halves only
# (E2E_HALVES=kafka: the kfake halves ran under the race detector).
E2E_PASS ?=
e2e-on:
	@seeds=$$($(KAFKA) up | tail -n 1) && sasl_seeds=$$($(KAFKA) sasl-bootstrap) && \
	echo "== real Kafka $(KAFKA_VERSION), $(KAFKA_NODES) node(s): $$seeds (SASL $$sasl_seeds); go test $(PKGS) (real-broker halves, E2E_PASS=$(E2E_PASS))" && \
	E2E_KAFKA_SEEDS=$$seeds E2E_KAFKA_SASL_SEEDS=$$sasl_seeds E2E_REQUIRE_KAFKA=1 E2E_HALVES=kafka E2E_PASS=$(E2E_PASS) go test $(GO_TEST_FLAGS) $(PKGS)

# The same suite without a real broker (kfake only; the real-broker halves skip).
test-kfake:
	go test $(GO_TEST_FLAGS) ./...

fuzz:
	.ci/fuzz FuzzReadFrame ./proxy $(FUZZTIME)
	.ci/fuzz FuzzParseRequestHeader ./proxy $(FUZZTIME)
	.ci/fuzz FuzzRewriters ./proxy $(FUZZTIME)
	.ci/fuzz FuzzRewriters ./intercept $(FUZZTIME)
	.ci/fuzz FuzzProduceTxn ./intercept $(FUZZTIME)
	.ci/fuzz FuzzAddPartitionsHook ./intercept $(FUZZTIME)
	.ci/fuzz FuzzClientAcks ./staging $(FUZZTIME)
	.ci/fuzz FuzzTxnShareAcknowledge ./kip1289 $(FUZZTIME)
	.ci/fuzz FuzzDecodeShadowRecord ./staging $(FUZZTIME)
	.ci/fuzz FuzzResolver ./markers $(FUZZTIME)

kafka-up:
	@$(KAFKA) up

kafka-down:
	@e2e/kafka/kafka.sh down

kafka-status:
	@e2e/kafka/kafka.sh status

# The Java library (java/, io.sharetx:sharetx-clients): its unit tests and the KIP-1289 scenarios
# (java/src/test/.../ScenariosTest.java) through a proxy built from this tree, started on free
# ports in front of a real cluster, and a second one in front of its SASL listener
# (java/test-with-proxy.sh sets SHARETX_BOOTSTRAP and SHARETX_SASL_BOOTSTRAP, so the scenarios
# run, never skip). It uses the cluster registered in KAFKA_E2E_DIR when one is running
# (any node count, never stopped or re-formatted here), else starts one with kafka.sh up.
# kafka-clients $(KAFKA_VERSION) against Kafka $(KAFKA_VERSION); mvn fills the Maven cache the
# first time and needs no network after (MVN_OFFLINE=1 runs it with -o).
test-java:
	@if e2e/kafka/kafka.sh status >/dev/null 2>&1; then \
	  running=$$(e2e/kafka/kafka.sh status | head -n 1); \
	  case "$$running" in "Kafka $(KAFKA_VERSION) "*) ;; *) echo "a cluster other than Kafka $(KAFKA_VERSION) is running ($$running): set KAFKA_E2E_DIR and KAFKA_BASE_PORT for another one"; exit 1;; esac; \
	  seeds=$$(e2e/kafka/kafka.sh bootstrap); \
	else seeds=$$($(KAFKA) up | tail -n 1); fi && \
	sasl_seeds=$$(e2e/kafka/kafka.sh sasl-bootstrap) && \
	echo "== Java library, kafka-clients $(KAFKA_VERSION) through the proxy to Kafka $(KAFKA_VERSION) at $$seeds (SASL $$sasl_seeds)" && \
	SASL_SEEDS=$$sasl_seeds java/test-with-proxy.sh "$$seeds" -Dkafka.version=$(KAFKA_VERSION)

# The same through the zero-config start: sharetx with no upstream, its embedded cluster (kfake).
# The tests that need a SASL listener or the cluster's own address skip, saying so.
test-java-embedded:
	@echo "== Java library, kafka-clients $(KAFKA_VERSION) through the zero-config start (embedded cluster)"
	@java/test-with-proxy.sh embedded -Dkafka.version=$(KAFKA_VERSION)

# The same with kafka-clients 4.2.2 against Kafka 4.2.2, on a one-node cluster of its own
# (JAVA_COMPAT_DIR, ports from JAVA_COMPAT_PORT), stopped afterwards.
JAVA_COMPAT_VERSION ?= 4.2.2
JAVA_COMPAT_DIR ?= /tmp/sharetx-kafka-java-$(JAVA_COMPAT_VERSION)
JAVA_COMPAT_PORT ?= 29092
JAVA_COMPAT_KAFKA := KAFKA_VERSION=$(JAVA_COMPAT_VERSION) KAFKA_NODES=1 KAFKA_E2E_DIR=$(JAVA_COMPAT_DIR) KAFKA_BASE_PORT=$(JAVA_COMPAT_PORT) e2e/kafka/kafka.sh
test-java-compat:
	@seeds=$$($(JAVA_COMPAT_KAFKA) up | tail -n 1) && sasl_seeds=$$($(JAVA_COMPAT_KAFKA) sasl-bootstrap) || exit 1; \
	echo "== Java library, kafka-clients $(JAVA_COMPAT_VERSION) through the proxy to Kafka $(JAVA_COMPAT_VERSION) at $$seeds (SASL $$sasl_seeds)"; \
	rc=0; JAVA_TEST_COPY=1 SASL_SEEDS=$$sasl_seeds java/test-with-proxy.sh "$$seeds" -Dkafka.version=$(JAVA_COMPAT_VERSION) || rc=$$?; \
	$(JAVA_COMPAT_KAFKA) down; exit $$rc

# The Python library (python/, the sharetx package for confluent-kafka): its unit tests, the
# KIP-1289 scenarios, the security protocols, the stalled sidecar and the examples, with pytest in a
# virtual environment (python/.venv, made and filled by the script: pip install ./python pytest),
# through proxies built from this tree on free ports in front of the running Kafka $(KAFKA_VERSION)
# cluster (or one it starts) and its SASL listener (python/test-with-proxy.sh; SHARETX_REQUIRE_SIDECAR=1:
# the scenarios fail rather than skip without a proxy).
test-python:
	@if e2e/kafka/kafka.sh status >/dev/null 2>&1; then seeds=$$(e2e/kafka/kafka.sh bootstrap); \
	else seeds=$$($(KAFKA) up | tail -n 1); fi && \
	sasl_seeds=$$(e2e/kafka/kafka.sh sasl-bootstrap) && \
	echo "== Python library (confluent-kafka) through the proxy to $$seeds (SASL $$sasl_seeds)" && \
	SASL_SEEDS=$$sasl_seeds python/test-with-proxy.sh "$$seeds" -q

# The same through the zero-config start (embedded cluster); the tests that need a SASL listener or
# the cluster's own address skip, saying so.
test-python-embedded:
	@echo "== Python library (confluent-kafka) through the zero-config start (embedded cluster)"
	@python/test-with-proxy.sh embedded -q

# Chaos test of transactional share-group acknowledgements (e2e/chaos): starts
# (or reuses) a three-node cluster, then one phase per fault (none, worker-kill,
# proxy-kill, broker-restart, worker-stall, txn-timeout) with sharetx and worker
# processes; prints a table, fails if any phase lost, duplicated or left
# unacknowledged an input. More flags: CHAOS_FLAGS='--records 500 --faults
# none,proxy-kill --json chaos.json'. KAFKA_E2E_DIR/KAFKA_BASE_PORT pass through.
CHAOS_FLAGS ?=
# CHAOS_WORKER=java: the workers in Java (e2e/chaos/java, the library's consume-transform-produce;
# needs java, javac and mvn); CHAOS_WORKER=python: in Python (e2e/chaos/python, confluent-kafka and
# the sharetx package in python/.venv; needs python3).
CHAOS_WORKER ?= go
chaos:
	@seeds=$$(KAFKA_VERSION=$(KAFKA_VERSION) KAFKA_NODES=3 e2e/kafka/kafka.sh up | tail -n 1) && echo "== chaos ($(CHAOS_WORKER) workers) on real Kafka $(KAFKA_VERSION) x3: $$seeds" && \
	go run ./e2e/chaos --seeds $$seeds --kafka-script e2e/kafka/kafka.sh --worker-lang $(CHAOS_WORKER) $(CHAOS_FLAGS)

# Soak (e2e/chaos soak): 25 minutes by default (SOAK_FLAGS='--duration 6h' for hours) on a
# three-node cluster (started or reused): 2 sidecars, 2 Go and 1 Java workers, random aborts, and
# in turn every 3 minutes a worker kill -9, a kill -9 and restart of the last sidecar, a broker
# restart; the input written in transactions half of the time; at least 1,000,000 inputs; a
# churner (a new share group, member and transactional id every 2 s through sidecar 1). Every
# 30 s each sidecar is sampled (RSS, heap, goroutines, connections, fds, the ledger's sizes,
# sessions, open calls, shadow tail lag, commit→applied p99) and printed; at the end a growth
# test per figure (thresholds printed), a plot (soak.png in the work directory) and the
# exactly-once verdict. Fails when a figure keeps growing or an input is lost, duplicated or left.
SOAK_FLAGS ?=
soak:
	@seeds=$$(KAFKA_VERSION=$(KAFKA_VERSION) KAFKA_NODES=3 e2e/kafka/kafka.sh up | tail -n 1) && echo "== soak on real Kafka $(KAFKA_VERSION) x3: $$seeds" && \
	go run ./e2e/chaos soak --seeds $$seeds --kafka-script e2e/kafka/kafka.sh $(SOAK_FLAGS)

# ---- deployment files and documentation (configs/k8s, configs/grafana, docs/)
.PHONY: image docs deploy-check

# Container image (Dockerfile: static binary on distroless/static, non-root).
# Needs a container engine; none runs on the project's CI machine.
IMAGE ?= ghcr.io/sharetx/sharetx:dev
image:
	docker build -t $(IMAGE) .

# docs/configuration.md is generated from the configs package; a test fails
# when it is out of date.
docs:
	go run ./configs/gendoc > docs/configuration.md.tmp && mv docs/configuration.md.tmp docs/configuration.md

# Offline checks of the Kubernetes manifests, the Dockerfile's build, the
# Grafana dashboard and the docs against the code (no Kafka needed).
deploy-check:
	go vet ./configs/... && go test -count=1 ./configs/...

# Benchmarks (e2e/bench): starts (or reuses) a one-node cluster, builds
# cmd/sharetx and runs it as a separate process in front of it, and measures
# side by side, in interleaved rounds reported as medians [min–max]:
# pass-through direct vs proxy (franz-go, ProducerPerformance,
# ShareConsumerPerformance) and the proxy's CPU per MB; share-group EOS
# through sharetx against consumer-group EOS (sendOffsetsToTransaction) and
# Kafka transactions alone at transactions of 10, 100 and 1000, every
# exactly-once run checked per input id; W = 1, 2, 4, 8 workers on 1 and 2
# partitions with 2 ms of waiting per record; the Java library against
# KafkaConsumer + sendOffsetsToTransaction; TxnShareAcknowledge and
# commit→applied latency. Prints tables and GOAL lines (reported, never
# asserted), writes bench-results/bench.json, bench.png and
# bench-scaling.png. About 20 minutes on 2 cores; bench-quick about 5;
# bench-pin runs the pass-through rounds with the proxy on a CPU of its own
# (the only fair judge of pass-through on 2 cores). More flags:
# BENCH_FLAGS='--rounds 5 --skip-java --parts pipelines,scaling'. It
# registers a one-node cluster in KAFKA_E2E_DIR (a three-node one there is
# stopped first); KAFKA_E2E_DIR/KAFKA_BASE_PORT pass through.
BENCH_FLAGS ?=
bench:
	@KAFKA_VERSION=$(KAFKA_VERSION) KAFKA_NODES=1 go run ./e2e/bench --kafka-script e2e/kafka/kafka.sh $(BENCH_FLAGS)

bench-quick:
	@KAFKA_VERSION=$(KAFKA_VERSION) KAFKA_NODES=1 go run ./e2e/bench --kafka-script e2e/kafka/kafka.sh --quick $(BENCH_FLAGS)

bench-pin:
	@KAFKA_VERSION=$(KAFKA_VERSION) KAFKA_NODES=1 go run ./e2e/bench --kafka-script e2e/kafka/kafka.sh --pin --parts passthrough --repeat 5 \
		--json bench-results/bench-pin.json $(BENCH_FLAGS)

# The demo (examples/demo): builds cmd/sharetx, starts it with its embedded
# cluster (fresh temporary data dir, free ports) and runs a consume-transform-
# produce application (3 worker processes, 3000 records) while killing
# workers with kill -9, exactly-once via sharetx and then at-least-once;
# prints both side by side. About 1.5 minutes; no Kafka needed. More flags:
# DEMO_FLAGS='--records 1000 --crashes 6 --seed 42 --mode at-least-once'.
DEMO_FLAGS ?=
demo:
	go run ./examples/demo $(DEMO_FLAGS)

# The demo with its workers in Java (examples/demo/java, built by java/apps.sh; needs Java 17 and Maven).
demo-java:
	go run ./examples/demo --worker-lang java $(DEMO_FLAGS)

# The demo with its workers in Python (examples/demo/python, in python/venv.sh's environment; needs python3).
demo-python:
	go run ./examples/demo --worker-lang python $(DEMO_FLAGS)
