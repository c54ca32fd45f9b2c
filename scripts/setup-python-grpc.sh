#!/usr/bin/env bash
# Creates (or checks) the Python venv used by the gRPC interop tests: `.venv-grpc` at the repo
# root with PyPI `rocketmq-python-client==5.1.2`, Apache's pure-Python 5.x client (grpcio). It
# cannot share `.venv`: the C++ client package `rocketmq==0.4.4` there installs the same
# top-level package name `rocketmq`. Idempotent: a venv that already imports the pinned client is
# left alone. Installs python3/python3-venv with apt-get when run as root or with sudo, as on a
# fresh Debian CI machine. Prints the venv's python path last.
#
#   bash scripts/setup-python-grpc.sh     # then: .venv-grpc/bin/python tests/interop/grpc_interop.py -h
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.venv-grpc"
py="$venv/bin/python"
version=5.1.2

log() { printf 'setup-python-grpc: %s\n' "$*" >&2; }

# apt_install PKG...: Debian packages, with sudo when not root (scripts/apt.sh).
source scripts/apt.sh

# The pinned version, importable (grpcio's compiled module included).
client_ok() {
  # (pip's output is read whole: under pipefail, `grep -q` closing the pipe early fails it.)
  [[ -x $py ]] &&
    [[ $("$py" -m pip show rocketmq-python-client 2>/dev/null | sed -n 's/^Version: //p') == "$version" ]] &&
    HOME="${TMPDIR:-/tmp}" "$py" -c 'from rocketmq import Producer, SimpleConsumer, PushConsumer' >/dev/null 2>&1
}

if client_ok; then
  log "venv ok ($("$py" -c 'import sys; print(sys.version.split()[0])'), rocketmq-python-client $version)"
  echo "$py"
  exit 0
fi

# 1. A python3 that can make venvs (Debian splits ensurepip into python3-venv).
if ! command -v python3 >/dev/null 2>&1; then
  apt_install python3 python3-venv
fi
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  apt_install python3-venv
fi

# 2. The venv (a half-made one from an interrupted run is rebuilt).
if [[ ! -x $py ]] || ! "$py" -m pip --version >/dev/null 2>&1; then
  rm -rf "$venv"
  log "python3 -m venv $venv"
  if ! python3 -m venv "$venv" >&2; then
    rm -rf "$venv"
    apt_install python3-venv
    python3 -m venv "$venv" >&2
  fi
fi

# 3. The client, pinned (its dependencies, grpcio and protobuf among them, come with it).
log "pip install rocketmq-python-client==$version"
"$py" -m pip install --disable-pip-version-check -q "rocketmq-python-client==$version" >&2

if ! client_ok; then
  log "venv built but 'from rocketmq import Producer' fails:"
  HOME="${TMPDIR:-/tmp}" "$py" -c 'from rocketmq import Producer, SimpleConsumer, PushConsumer' >&2 || true
  exit 1
fi
log "venv ready"
echo "$py"
