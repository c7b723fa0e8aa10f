# syntax=docker/dockerfile:1
# jobmesh images. One build stage compiles the two static binaries (CGO_ENABLED=0: the SQLite
# driver is pure Go); each service then has its own small, non-root image target:
#
#   docker build --target scheduler -t jobmesh/scheduler .   # also: registry, logsvc, gateway
#   docker build --target agent     -t jobmesh/agent .       # executor agent, with bash and python3
#   docker build -t jobmesh/dev .                            # all in one process (`jobmesh dev`)
#
# --build-arg VERSION=$(git describe --tags --always --dirty) (and COMMIT, DATE) stamp what
# `jobmesh version` reports.
#
# docker-compose.yml builds every target. The service images are distroless (no shell, no
# package manager): their health checks run `jobmesh health`.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum go.work go.work.sum ./
COPY gen/go.mod gen/go.sum gen/
COPY services/executor-agent/go.mod services/executor-agent/go.sum services/executor-agent/
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
# What `jobmesh version` reports: scripts/test.sh passes git describe's; empty ones fall back to
# "devel" and what Go records.
ARG VERSION=""
ARG COMMIT=""
ARG DATE=""
RUN ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.date=${DATE}" \
 && go build -trimpath -ldflags="$ldflags" -o /out/jobmesh ./cmd/jobmesh \
 && go build -trimpath -ldflags="$ldflags" -o /out/jobmesh-agent ./services/executor-agent/cmd/jobmesh-agent

# The base of the service images: the jobmesh binary on distroless, user nonroot (65532).
FROM gcr.io/distroless/static-debian12:nonroot AS service
COPY --from=build /out/jobmesh /jobmesh
USER nonroot:nonroot
ENTRYPOINT ["/jobmesh"]

FROM service AS scheduler
EXPOSE 9010 9464
ENTRYPOINT ["/jobmesh", "scheduler"]
HEALTHCHECK --interval=5s --timeout=4s --retries=12 CMD ["/jobmesh", "health", "127.0.0.1:9010"]

FROM service AS registry
EXPOSE 9011 9464
ENTRYPOINT ["/jobmesh", "registry"]
HEALTHCHECK --interval=5s --timeout=4s --retries=12 CMD ["/jobmesh", "health", "127.0.0.1:9011"]

FROM service AS logsvc
EXPOSE 9012 9464
ENTRYPOINT ["/jobmesh", "logsvc"]
HEALTHCHECK --interval=5s --timeout=4s --retries=12 CMD ["/jobmesh", "health", "127.0.0.1:9012"]

FROM service AS gateway
EXPOSE 8080 9013 9464
ENTRYPOINT ["/jobmesh", "gateway"]
HEALTHCHECK --interval=5s --timeout=4s --retries=12 CMD ["/jobmesh", "health", "http://127.0.0.1:8080/healthz", "127.0.0.1:9013"]

# The executor agent runs GLUE scripts, so it keeps a small Debian with bash and python3 (add
# node, php or pwsh in a derived image if your jobs need them).
FROM debian:bookworm-slim AS agent
RUN apt-get update && apt-get install -y --no-install-recommends bash python3 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home --home-dir /var/lib/jobmesh-agent jobmesh
COPY --from=build /out/jobmesh-agent /usr/local/bin/jobmesh-agent
USER jobmesh
WORKDIR /var/lib/jobmesh-agent
ENV JOBMESH_LOG_DIR=/var/lib/jobmesh-agent/logs
EXPOSE 9999
ENTRYPOINT ["jobmesh-agent"]

# All in one process on an embedded etcd and SQLite (or Postgres with JOBMESH_DATABASE_URL): the
# default target, for trying jobmesh out.
FROM debian:bookworm-slim AS dev
RUN apt-get update && apt-get install -y --no-install-recommends bash python3 ca-certificates \
    && rm -rf /var/lib/apt/lists/* && useradd --system --create-home jobmesh
COPY --from=build /out/jobmesh /usr/local/bin/jobmesh
USER jobmesh
WORKDIR /home/jobmesh
EXPOSE 8080
ENTRYPOINT ["jobmesh"]
CMD ["dev", "--http-addr", "0.0.0.0:8080", "--data-dir", "/home/jobmesh/data"]
