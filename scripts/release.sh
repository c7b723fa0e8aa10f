#!/usr/bin/env bash
# make release: static binaries of jobmesh and jobmesh-agent for linux/amd64 and linux/arm64,
# stamped with the version (git describe --tags --always --dirty), commit and build date, and a
# SHA256SUMS file, into dist/ (git-ignored). VERSION=... overrides the version.
#
#   dist/jobmesh_<version>_linux_amd64/{jobmesh,jobmesh-agent,README.md,LICENSE}   likewise linux_arm64
#   dist/jobmesh_<version>_linux_<arch>.tar.gz                   the same, one archive per platform
#   dist/SHA256SUMS                                              sha256sum of the archives and binaries
set -euo pipefail
cd "$(dirname "$0")/.."

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
commit=$(git rev-parse HEAD 2>/dev/null || echo "")
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w -X main.version=$version -X main.commit=$commit -X main.date=$date"
platforms=(linux/amd64 linux/arm64)

rm -rf dist
mkdir -p dist
for p in "${platforms[@]}"; do
  os=${p%/*} arch=${p#*/}
  name="jobmesh_${version}_${os}_${arch}"
  out="dist/$name"
  echo "building $name"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$out/jobmesh" ./cmd/jobmesh
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$out/jobmesh-agent" ./services/executor-agent/cmd/jobmesh-agent
  cp README.md LICENSE "$out/"
  tar -C dist --owner=0 --group=0 --sort=name --mtime="$date" -czf "dist/$name.tar.gz" "$name"
done

# A binary for this machine says what it is, and is static.
host="dist/jobmesh_${version}_$(go env GOOS)_$(go env GOARCH)"
if [ -d "$host" ]; then
  "$host/jobmesh" version | head -1 | grep -qx "jobmesh $version" || { echo "$host/jobmesh version does not say $version" >&2; exit 1; }
  "$host/jobmesh-agent" --version | head -1 | grep -qx "jobmesh-agent $version" || { echo "$host/jobmesh-agent --version does not say $version" >&2; exit 1; }
  if command -v file >/dev/null && file "$host/jobmesh" | grep -q dynamically; then
    echo "$host/jobmesh is dynamically linked" >&2; exit 1
  fi
fi

(cd dist && sha256sum ./*.tar.gz ./*/jobmesh ./*/jobmesh-agent | sed 's| \./| |' > SHA256SUMS)
echo
echo "dist/ (version $version):"
cat dist/SHA256SUMS
