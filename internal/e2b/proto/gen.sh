#!/bin/sh
# Generates the Go code of envd's protos (copied unchanged from E2B's spec/envd, Apache-2.0).
# Needs protoc (Debian: protobuf-compiler), protoc-gen-go and protoc-gen-connect-go on PATH:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.10
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.19.1
set -e
cd "$(dirname "$0")"
M=github.com/sandpit-dev/sandpit/internal/e2b/proto
protoc -I . -I /usr/include \
  --go_out=. --go_opt=paths=source_relative \
  --go_opt=Mprocess/process.proto=$M/process --go_opt=Mfilesystem/filesystem.proto=$M/filesystem \
  --connect-go_out=. --connect-go_opt=paths=source_relative \
  --connect-go_opt=Mprocess/process.proto=$M/process --connect-go_opt=Mfilesystem/filesystem.proto=$M/filesystem \
  process/process.proto filesystem/filesystem.proto
