# Sourced by the setup scripts (from the repo root), after they define `log`:
# `apt_install PKG...` installs Debian packages, through sudo when not root, running
# `apt-get update` once per script run. Fails (returns 1) with a message when it cannot.
apt_updated=0
apt_install() {
  local sudo=""
  if [[ $(id -u) != 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      log "need Debian packages $* but not root and no sudo; install them and re-run"
      return 1
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    log "need system packages $* but apt-get is not available"
    return 1
  fi
  if [[ $apt_updated == 0 ]]; then
    log "apt-get update"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    apt_updated=1
  fi
  log "apt-get install $*"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2
}
