#!/usr/bin/env bash
# Runs the whole druidctl test suite. Installs what the tests need when it is missing
# (Debian's etcd-server and etcd-client for the real-etcd tests, cargo-nextest), then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v etcd >/dev/null 2>&1 || ! command -v etcdctl >/dev/null 2>&1; then
  echo "test.sh: installing etcd-server and etcd-client (needed by the real-etcd tests)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client >/dev/null
fi
if ! command -v kubectl >/dev/null 2>&1; then
  echo "test.sh: kubectl is required by the fidelity tests and was not found on PATH" >&2
  exit 1
fi
# Tests that need real etcd fail (never skip) when it is missing.
export DRUIDCTL_REQUIRE_ETCD=1

if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install cargo-nextest --locked
fi

profile=default
[ -n "${CI:-}" ] && profile=ci
# Benches are measured with `cargo bench`, not run as tests.
cargo nextest run --workspace --lib --bins --tests --profile "$profile" "$@"
