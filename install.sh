#!/usr/bin/env bash
# Installs druidctl from this source tree: the binary (cargo install --path . --locked), the kubectl-druid link,
# the kubectl_complete-druid shim, shell completions and man pages, all under PREFIX (default ~/.local).
# Idempotent: run it again to update. `./install.sh --uninstall` removes what it installed.
set -euo pipefail
cd "$(dirname "$0")"

PREFIX="${PREFIX:-$HOME/.local}"
BIN="$PREFIX/bin"
SHARE="$PREFIX/share"
MAN="$SHARE/man/man1"
BASH_DIR="$SHARE/bash-completion/completions"
ZSH_DIR="$SHARE/zsh/site-functions"
FISH_DIR="$SHARE/fish/vendor_completions.d"

usage() { echo "usage: $0 [--uninstall]   (PREFIX=$PREFIX)"; }

uninstall() {
  if command -v cargo >/dev/null 2>&1 && [ -x "$BIN/druidctl" ]; then
    cargo uninstall --root "$PREFIX" druidctl >/dev/null 2>&1 || true
  fi
  rm -f "$BIN/druidctl" "$BIN/kubectl-druid" "$BIN/kubectl_complete-druid"
  rm -f "$BASH_DIR/druidctl" "$BASH_DIR/kubectl-druid" "$ZSH_DIR/_druidctl" "$FISH_DIR/druidctl.fish"
  rm -f "$MAN"/druidctl.1 "$MAN"/druidctl-*.1
  echo "druidctl removed from $PREFIX"
}

case "${1:-}" in
  "") ;;
  --uninstall) uninstall; exit 0 ;;
  -h|--help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac

command -v cargo >/dev/null 2>&1 || { echo "install.sh: cargo is required (https://rustup.rs)" >&2; exit 1; }
# The etcd client (crate etcd-client) compiles etcd's protobuf definitions at build time with protoc.
if ! command -v protoc >/dev/null 2>&1 && [ -z "${PROTOC:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "install.sh: installing protobuf-compiler (protoc, needed to build the etcd client)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
  else
    echo "install.sh: protoc is required to build the etcd client; install it (Debian/Ubuntu: apt-get install protobuf-compiler, macOS: brew install protobuf) or set PROTOC" >&2
    exit 1
  fi
fi
# DRUIDCTL_CARGO_FLAGS=--debug (with CARGO_TARGET_DIR=target) reuses a development build.
echo "install.sh: compiling druidctl from source with cargo; this takes several minutes on 2 cores (cargo shows its progress)"
cargo install --path . --locked --root "$PREFIX" --force ${DRUIDCTL_CARGO_FLAGS:-}
mkdir -p "$BIN" "$MAN" "$BASH_DIR" "$ZSH_DIR" "$FISH_DIR"
ln -sf druidctl "$BIN/kubectl-druid"
install -m 0755 completions/kubectl_complete-druid "$BIN/kubectl_complete-druid"
install -m 0644 completions/druidctl.bash "$BASH_DIR/druidctl"
install -m 0644 completions/_druidctl "$ZSH_DIR/_druidctl"
install -m 0644 completions/druidctl.fish "$FISH_DIR/druidctl.fish"
install -m 0644 man/*.1 "$MAN/"
# Cargo metadata files that `cargo install --root` leaves behind are harmless; keep them for `cargo uninstall`.
echo "druidctl installed to $BIN (kubectl plugin: kubectl druid; man druidctl)"
case ":$PATH:" in *":$BIN:"*) ;; *) echo "note: add $BIN to PATH" ;; esac
