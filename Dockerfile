# sharetx container image: one static binary on a distroless base, run as a
# non-root user (uid/gid 65532, "nonroot").
#
#   make image                        # docker build -t $(IMAGE) .  (IMAGE ?= ghcr.io/sharetx/sharetx:dev)
#   docker run --rm -p 127.0.0.1:9644:9644 ghcr.io/sharetx/sharetx:dev --upstream broker1:9092 --metrics 0.0.0.0:9644
#
# No image is published: build it and push it to your own registry, then set
# that name in configs/k8s/deployment.yaml. This file has NOT been built on
# the project's CI machine, which has a docker client but no engine; the build
# command below is, by configs/k8s's test (it builds it and runs the binary).

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static (no cgo: the net and user packages use their pure-Go versions),
# reproducible paths, no debug symbols.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/sharetx ./cmd/sharetx

# distroless/static: CA certificates, /etc/passwd with nonroot, tzdata; no
# shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sharetx /usr/local/bin/sharetx
USER 65532:65532
# 9092: bootstrap listener (listen.bootstrap). 9093-9102: one listener per
# upstream broker, listen.broker_port_base + node id (node ids 0..9 here; a
# cluster with other ids needs other ports, or listen.broker_ports).
# 9644: /metrics, /healthz, /readyz (metrics.address).
# EXPOSE only documents: the listeners bind where the configuration says. The
# defaults bind 127.0.0.1 — right for a sidecar, whose application is in the
# same pod — and metrics.address must be 0.0.0.0:9644 for the kubelet's probes.
EXPOSE 9092 9093-9102 9644
ENTRYPOINT ["/usr/local/bin/sharetx"]
