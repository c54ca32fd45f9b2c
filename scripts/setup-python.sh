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
# root, venv, py, log, apt_install and the steps both interop venvs share (make_venv, ...).
source scripts/lib-python-venv.sh setup-python .venv

# The client imports cleanly only when librocketmq.so and everything it links resolve.
probe='import rocketmq.client'
client_ok() { probe_ok; }
client_about() { echo "rocketmq $("$py" -m pip show rocketmq 2>/dev/null | sed -n 's/^Version: //p')"; }

exit_if_ready
make_venv

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

finish_venv
