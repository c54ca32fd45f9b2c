#!/usr/bin/env bash
# Creates (or checks) the Python venv used by the interop tests: `.venv` at the repo root with
# PyPI `rocketmq==0.4.4`, which bundles Apache's C++ client (librocketmq.so, rocketmq-client-cpp
# 1.2.x). Idempotent: a venv that already imports the client is left alone. Installs missing
# system pieces with apt-get (python3, python3-venv, shared libraries the bundled .so needs) when
# run as root or with sudo, as on a fresh Debian CI machine. Prints the venv's python path last.
#
#   bash scripts/setup-python.sh          # then: .venv/bin/python tests/interop/cpp_interop.py -h
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.venv"
py="$venv/bin/python"

log() { printf 'setup-python: %s\n' "$*" >&2; }

# apt_install PKG...: Debian packages, with sudo when not root (scripts/apt.sh).
source scripts/apt.sh

# The client imports cleanly only when librocketmq.so and everything it links resolve.
client_ok() {
  [[ -x $py ]] && HOME="${TMPDIR:-/tmp}" "$py" -c 'import rocketmq.client' >/dev/null 2>&1
}

if client_ok; then
  log "venv ok ($("$py" -c 'import sys; print(sys.version.split()[0])'), rocketmq $("$py" -m pip show rocketmq 2>/dev/null | sed -n 's/^Version: //p'))"
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

# 3. The client.
if ! "$py" -m pip show rocketmq 2>/dev/null | grep -qx 'Version: 0.4.4'; then
  log "pip install rocketmq==0.4.4"
  "$py" -m pip install --disable-pip-version-check -q 'rocketmq==0.4.4' >&2
fi

# 4. Shared libraries the bundled librocketmq.so links against.
lib=$("$py" - <<'PY'
import importlib.util, os
spec = importlib.util.find_spec("rocketmq")
print(os.path.join(os.path.dirname(spec.origin), "librocketmq.so"))
PY
)
if [[ ! -f $lib ]]; then
  log "librocketmq.so not found in the rocketmq package (expected $lib)"
  exit 1
fi
if ! command -v ldd >/dev/null 2>&1; then
  apt_install libc-bin
fi
missing=$(ldd "$lib" | awk '/not found/ {print $1}' | sort -u)
if [[ -n $missing ]]; then
  log "librocketmq.so misses: $(echo $missing)"
  pkgs=()
  for so in $missing; do
    case $so in
      libstdc++.so.*) pkgs+=(libstdc++6) ;;
      libgcc_s.so.*) pkgs+=(libgcc-s1) ;;
      libz.so.*) pkgs+=(zlib1g) ;;
      libssl.so.*|libcrypto.so.*) pkgs+=(libssl3) ;;
      libcurl.so.*) pkgs+=(libcurl4) ;;
      libm.so.*|libc.so.*|libdl.so.*|libpthread.so.*|librt.so.*) pkgs+=(libc6) ;;
      *) log "no known Debian package for $so; trying libstdc++6/libgcc-s1/zlib1g"
         pkgs+=(libstdc++6 libgcc-s1 zlib1g) ;;
    esac
  done
  apt_install $(printf '%s\n' "${pkgs[@]}" | sort -u)
  still=$(ldd "$lib" | awk '/not found/ {print $1}')
  if [[ -n $still ]]; then
    log "still missing after install: $(echo $still)"
    exit 1
  fi
fi

if ! client_ok; then
  log "venv built but 'import rocketmq.client' fails:"
  HOME="${TMPDIR:-/tmp}" "$py" -c 'import rocketmq.client' >&2 || true
  exit 1
fi
log "venv ready"
echo "$py"
