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
# root, venv, py, log, apt_install and the steps both interop venvs share (make_venv, ...).
source scripts/lib-python-venv.sh setup-python-grpc .venv-grpc
version=5.1.2

# The pinned version, importable (grpcio's compiled module included).
probe='from rocketmq import Producer, SimpleConsumer, PushConsumer'
client_ok() {
  # (pip's output is read whole: under pipefail, `grep -q` closing the pipe early fails it.)
  [[ -x $py ]] &&
    [[ $("$py" -m pip show rocketmq-python-client 2>/dev/null | sed -n 's/^Version: //p') == "$version" ]] &&
    probe_ok
}
client_about() { echo "rocketmq-python-client $version"; }

exit_if_ready
make_venv

# 3. The client, pinned (its dependencies, grpcio and protobuf among them, come with it).
log "pip install rocketmq-python-client==$version"
"$py" -m pip install --disable-pip-version-check -q "rocketmq-python-client==$version" >&2

finish_venv
