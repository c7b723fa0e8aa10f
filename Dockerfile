# syntax=docker/dockerfile:1
# jobmesh all-in-one image (first version; per-service images come with the deployment issue).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/jobmesh ./cmd/jobmesh

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends bash python3 ca-certificates \
    && rm -rf /var/lib/apt/lists/* && useradd --system --create-home jobmesh
COPY --from=build /out/jobmesh /usr/local/bin/jobmesh
USER jobmesh
WORKDIR /home/jobmesh
EXPOSE 8080
ENTRYPOINT ["jobmesh"]
CMD ["dev", "--http-addr", "0.0.0.0:8080", "--data-dir", "/home/jobmesh/data"]
