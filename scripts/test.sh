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
if ! command -v man >/dev/null 2>&1; then
  echo "test.sh: installing man-db (tests/man_pages.rs renders every man page with man --warnings)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq man-db >/dev/null
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
# Benches are measured with `cargo bench`, not run as tests. A failure still lets the external pass below run.
status=0
# The README of crates/kube-sim is its crate doc; its example runs as a doctest (nextest runs no doctests).
cargo test --doc -p kube-sim --quiet || status=$?
cargo nextest run --workspace --lib --bins --tests --profile "$profile" "$@" || status=$?

# The end-to-end tests once more against an external API server: the embedded one, started separately over TCP,
# so the playground's external path (CRDs installed through the API, namespaces of its own, sidecars reached
# directly) runs on every change. docs/testing.md lists the set and what stays embedded-only.
# DRUIDCTL_SKIP_EXTERNAL_E2E=1 skips this pass (e.g. while iterating on one test).
if [ -z "${DRUIDCTL_SKIP_EXTERNAL_E2E:-}" ]; then
  e2e_dir="$(mktemp -d)"
  apiserver_pid=""
  cleanup() {
    if [ -n "$apiserver_pid" ]; then
      kill "$apiserver_pid" 2>/dev/null || true
      wait "$apiserver_pid" 2>/dev/null || true
    fi
    rm -rf "$e2e_dir"
  }
  trap cleanup EXIT
  # The binary the main run just built (same profile, same target dir).
  target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
  "$target_dir/debug/druidctl" playground apiserver --kubeconfig-out "$e2e_dir/kubeconfig" >"$e2e_dir/apiserver.log" 2>&1 &
  apiserver_pid=$!
  for _ in $(seq 1 100); do
    [ -s "$e2e_dir/kubeconfig" ] && break
    kill -0 "$apiserver_pid" 2>/dev/null || { cat "$e2e_dir/apiserver.log" >&2; exit 1; }
    sleep 0.1
  done
  [ -s "$e2e_dir/kubeconfig" ] || { echo "test.sh: the API server did not start" >&2; exit 1; }
  # Every test removes its namespaces (and their Nodes) again: checked after the run.
  left() { kubectl --kubeconfig "$e2e_dir/kubeconfig" get namespaces,nodes -o name | sort; }
  before="$(left)"
  echo "test.sh: end-to-end tests against an external API server (KUBECONFIG $e2e_dir/kubeconfig)"
  started=$(date +%s)
  DRUIDCTL_TEST_KUBECONFIG="$e2e_dir/kubeconfig" cargo nextest run --profile "$profile" \
    --test landscape_playground --test tasks_playground --test runbook_recovery --test runbook_member_restore \
    --test runbook_refusals "$@" || status=$?
  echo "test.sh: external-server pass took $(( $(date +%s) - started ))s"
  after="$(left)"
  if [ "$before" != "$after" ]; then
    echo "test.sh: the end-to-end tests left objects on the external API server:" >&2
    comm -13 <(echo "$before") <(echo "$after") >&2
    status=1
  fi
fi
exit "$status"
