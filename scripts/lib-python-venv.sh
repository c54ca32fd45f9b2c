# Sourced by scripts/setup-python.sh (`.venv`, Apache's C++ client) and
# scripts/setup-python-grpc.sh (`.venv-grpc`, its 5.x client), from the repo root: what making
# and checking either interop venv takes alike, so that both are made one way and differ only
# in their client.
#
#   source scripts/lib-python-venv.sh NAME DIR  # log lines `NAME: ...`, the venv in DIR: sets
#                                               # root, venv, py; defines log, apt_install, probe_ok
#   probe='import ...'                          # the python statement that imports the client
#   client_ok() { ...; }                        # the right client is in the venv and imports
#   client_about() { ...; }                     # the client, as the `venv ok` line names it
#   exit_if_ready                               # a venv with the client is left alone (exit 0)
#   make_venv                                   # steps 1 and 2: python3, the venv
#   ...                                         # step 3 on: the client (and what it needs)
#   finish_venv                                 # checks it: prints $py, or exits 1
#
# All run under the script's `set -euo pipefail`: a failing step ends the script. Each prints
# to stderr only but for $py, the one line on stdout.

venv_name=$1
root=$(pwd)
venv="$root/$2"
py="$venv/bin/python"

log() { printf '%s: %s\n' "$venv_name" "$*" >&2; }

# apt_install PKG...: Debian packages, with sudo when not root (scripts/apt.sh).
source scripts/apt.sh

# probe_ok: the venv's python runs $probe cleanly (HOME aside: the clients write logs there).
probe_ok() {
  [[ -x $py ]] && HOME="${TMPDIR:-/tmp}" "$py" -c "$probe" >/dev/null 2>&1
}

# exit_if_ready: a venv that already has the client is left alone (the scripts are
# idempotent): says so, prints $py and exits 0.
exit_if_ready() {
  if client_ok; then
    log "venv ok ($("$py" -c 'import sys; print(sys.version.split()[0])'), $(client_about))"
    echo "$py"
    exit 0
  fi
}

# make_venv: steps 1 and 2, a python3 that can make venvs and the venv.
make_venv() {
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
}

# finish_venv: the client installed, the venv must pass client_ok; prints $py when it does,
# shows the import's error and exits 1 when not.
finish_venv() {
  if ! client_ok; then
    log "venv built but '$probe' fails:"
    HOME="${TMPDIR:-/tmp}" "$py" -c "$probe" >&2 || true
    exit 1
  fi
  log "venv ready"
  echo "$py"
}
