#!/usr/bin/env bash
# Runs the whole druidctl test suite. Installs what the tests need when it is missing
# (Debian's etcd-server and etcd-client for the real-etcd tests, man-db, fish and zsh, cargo-nextest), then runs
# every test.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v etcd >/dev/null 2>&1 || ! command -v etcdctl >/dev/null 2>&1; then
  echo "test.sh: installing etcd-server and etcd-client (needed by the real-etcd tests)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client >/dev/null
fi
if ! command -v protoc >/dev/null 2>&1 && [ -z "${PROTOC:-}" ]; then
  echo "test.sh: installing protobuf-compiler (protoc builds the etcd client's protobuf definitions)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
fi
if ! command -v man >/dev/null 2>&1; then
  echo "test.sh: installing man-db (tests/man_pages.rs renders every man page with man --warnings)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq man-db >/dev/null
fi
if ! command -v fish >/dev/null 2>&1 || ! command -v zsh >/dev/null 2>&1; then
  echo "test.sh: installing fish and zsh (tests/cli_completion_shells.rs completes through both shells)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fish zsh >/dev/null
fi
if ! command -v kubectl >/dev/null 2>&1; then
  echo "test.sh: kubectl is required by the fidelity tests and was not found on PATH" >&2
  exit 1
fi
# Tests that need real etcd fail (never skip) when it is missing.
export DRUIDCTL_REQUIRE_ETCD=1

profile=default
[ -n "${CI:-}" ] && profile=ci
# CI builds once from scratch: incremental state would only take disk (several GiB for this workspace).
[ -n "${CI:-}" ] && export CARGO_INCREMENTAL=0
disk() { df -Pk . | awk -v what="$1" 'NR == 2 { printf "test.sh: %s: %.1f GiB free on %s\n", what, $4 / 1048576, $6 }'; }
disk "before the build"

# cargo-nextest, when missing, is built while the workspace builds: the workspace's last crates (the library, the
# integration binary) compile one at a time and leave a core idle. It is built as packagers build it, without
# self-update and its TLS stack (`--no-default-features`), and unoptimised (`--debug`): it only schedules test
# processes, and fewer crates built without optimisation take less of the CI's time.
nextest_pid=""
nextest_log="$(mktemp)"
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "test.sh: building cargo-nextest beside the workspace (log: $nextest_log)"
  CARGO_PROFILE_DEV_DEBUG=0 cargo install cargo-nextest --locked --debug --no-default-features >"$nextest_log" 2>&1 &
  nextest_pid=$!
fi

# Benches are measured with `cargo bench`, not run as tests. A failure still lets the external pass below run.
status=0
# The README of crates/kube-sim is its crate doc; its example runs as a doctest (nextest runs no doctests).
cargo test --doc -p kube-sim --quiet || status=$?
# The same build nextest asks cargo for below, so that nextest finds it done.
cargo test --workspace --lib --bins --tests --no-run --quiet || status=$?
if [ -n "$nextest_pid" ] && ! wait "$nextest_pid"; then
  cat "$nextest_log" >&2
  echo "test.sh: installing cargo-nextest failed" >&2
  exit 1
fi
rm -f "$nextest_log"
cargo nextest run --workspace --lib --bins --tests --profile "$profile" "$@" || status=$?
disk "after the main pass"

# The end-to-end tests once more against a REAL kube-apiserver with its kube-controller-manager, from
# ../shared/realk8s (README.md there), started with a state directory and ports of its own and always stopped
# (trap), so the landscape and every runbook run next to the real built-in controllers. docs/testing.md lists the
# set and what stays embedded-only. A missing ../shared/realk8s fails the run under CI (CI set).
# DRUIDCTL_SKIP_EXTERNAL_E2E=1 skips this pass (e.g. while iterating on one test).
if [ -z "${DRUIDCTL_SKIP_EXTERNAL_E2E:-}" ]; then
  realk8s="$(pwd)/../shared/realk8s/realk8s.sh"
  if [ ! -x "$realk8s" ]; then
    if [ -n "${CI:-}" ]; then
      echo "test.sh: $realk8s is missing: the end-to-end pass against the real kube-apiserver cannot run" >&2
      exit 1
    fi
    echo "test.sh: WARNING: $realk8s is missing; the end-to-end pass against the real kube-apiserver did NOT run" >&2
    exit "$status"
  fi
  e2e_dir="$(mktemp -d)"
  export REALK8S_DIR="$e2e_dir/realk8s"
  # A free loopback port (nothing answers on it, not chosen yet), picked at random between the playground's
  # range (12000-29999, crates/landscape/src/etcd/ports.rs) and the kernel's ephemeral range (32768 and up), where
  # the main pass's outgoing connections could hold it by the time the server binds it.
  free_port() {
    local p
    while :; do
      p=$(( 30000 + RANDOM % 2700 ))
      case " ${taken_ports:-} " in *" $p "*) continue ;; esac
      if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
    done
  }
  taken_ports=""
  REALK8S_API_PORT=$(free_port); taken_ports="$taken_ports $REALK8S_API_PORT"
  REALK8S_ETCD_PORT=$(free_port); taken_ports="$taken_ports $REALK8S_ETCD_PORT"
  REALK8S_ETCD_PEER_PORT=$(free_port); taken_ports="$taken_ports $REALK8S_ETCD_PEER_PORT"
  REALK8S_KCM_PORT=$(free_port)
  export REALK8S_API_PORT REALK8S_ETCD_PORT REALK8S_ETCD_PEER_PORT REALK8S_KCM_PORT
  cleanup() {
    "$realk8s" stop >/dev/null 2>&1 || echo "test.sh: stopping the real kube-apiserver failed (state: $REALK8S_DIR)" >&2
    rm -rf "$e2e_dir"
  }
  trap cleanup EXIT
  if ! "$realk8s" start >"$e2e_dir/realk8s-start.log" 2>&1; then
    cat "$e2e_dir/realk8s-start.log" >&2
    for log in "$REALK8S_DIR"/run/*.log; do
      [ -f "$log" ] && { echo "--- last lines of $log" >&2; tail -n 30 "$log" >&2; }
    done
    echo "test.sh: the real kube-apiserver did not start" >&2
    exit 1
  fi
  kubeconfig="$REALK8S_DIR/kubeconfig"
  # Every test removes what it created: namespaces (with everything in them), Nodes and their Leases,
  # PersistentVolumes. Compared before and after the run (Events expire by themselves and are not compared).
  left() {
    {
      kubectl --kubeconfig "$kubeconfig" get namespaces,nodes,persistentvolumes,customresourcedefinitions -o name
      kubectl --kubeconfig "$kubeconfig" get -A -o name \
        pods,services,deployments,replicasets,statefulsets,jobs,persistentvolumeclaims,configmaps,secrets,leases,poddisruptionbudgets,serviceaccounts \
        | grep -v '^lease.coordination.k8s.io/apiserver-'
    } | sort
  }
  before="$(left)"
  echo "test.sh: end-to-end tests against the real kube-apiserver $(
    kubectl --kubeconfig "$kubeconfig" version -o json 2>/dev/null | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | tail -1
  ) with kube-controller-manager (KUBECONFIG $kubeconfig)"
  started=$(date +%s)
  e2e_filter='test(/^(landscape_playground|tasks_playground|runbook_recovery|runbook_member_restore|runbook_refusals|runbook_certs_playground)::/)'
  DRUIDCTL_TEST_KUBECONFIG="$kubeconfig" cargo nextest run --profile "$profile" \
    --test integration -E "$e2e_filter" "$@" || status=$?
  echo "test.sh: real-kube-apiserver pass took $(( $(date +%s) - started ))s"
  after="$(left)"
  # The CRDs are installed once by the harness and kept (docs/testing.md): not a leftover.
  after_cmp="$(echo "$after" | grep -v '^customresourcedefinition')"
  before_cmp="$(echo "$before" | grep -v '^customresourcedefinition')"
  if [ "$before_cmp" != "$after_cmp" ]; then
    echo "test.sh: the end-to-end tests left objects on the real kube-apiserver:" >&2
    comm -13 <(echo "$before_cmp") <(echo "$after_cmp") >&2
    status=1
  fi
fi
exit "$status"
