#!/usr/bin/env bash
# Installs the pinned code generators into ./bin (git-ignored). Idempotent and offline-friendly
# once the Go module cache and the npm cache hold them.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/bin"
mkdir -p "$BIN"

PROTOC_GEN_GO=v1.36.12
PROTOC_GEN_GO_GRPC=v1.6.2
GRPC_GATEWAY=v2.32.0
BUF=1.75.0

want() { # want <binary> <version-stamp>: true when bin/<binary> is missing or of another version
  [ ! -x "$BIN/$1" ] || [ "$(cat "$BIN/.$1.version" 2>/dev/null)" != "$2" ]
}
stamp() { echo "$2" >"$BIN/.$1.version"; }

if want protoc-gen-go $PROTOC_GEN_GO; then
  GOBIN="$BIN" go install google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO
  stamp protoc-gen-go $PROTOC_GEN_GO
fi
if want protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC; then
  GOBIN="$BIN" go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC
  stamp protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC
fi
for p in protoc-gen-grpc-gateway protoc-gen-openapiv2; do
  if want $p $GRPC_GATEWAY; then
    GOBIN="$BIN" go install github.com/grpc-ecosystem/grpc-gateway/v2/$p@$GRPC_GATEWAY
    stamp $p $GRPC_GATEWAY
  fi
done
if want buf $BUF; then
  # npm ships a prebuilt buf; go install of buf takes minutes and must never touch our go.mod.
  rm -rf "$BIN/.npm-buf"
  npm install --silent --no-audit --no-fund --prefix "$BIN/.npm-buf" "@bufbuild/buf@$BUF" >/dev/null
  ln -sf "$BIN/.npm-buf/node_modules/.bin/buf" "$BIN/buf"
  stamp buf $BUF
fi
