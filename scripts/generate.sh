#!/usr/bin/env bash
# Regenerates everything under gen/ and openapi/ from proto/. buf and the Go plugins are Go tools; the
# TypeScript plugin comes from tests/tsclient/node_modules (run `npm ci` there first).
set -euo pipefail
cd "$(dirname "$0")/.."
go tool -modfile=tools/buf.mod buf lint
# buf.gen.yaml has clean: true, which wipes gen/ (gen/ts included): the TypeScript template runs after it.
go tool -modfile=tools/buf.mod buf generate
go tool -modfile=tools/buf.mod buf generate --template buf.gen.ts.yaml --path proto/sluice/admin
