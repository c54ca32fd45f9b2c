#!/usr/bin/env bash
# Installs what the web console's browser test needs (shell/client/tests/console.rs):
# Debian's chromium (headless, driven through its DevTools protocol) and Node.js, and
# playwright-core from npm at the version package-lock.json pins (no browser download:
# the test points it at /usr/bin/chromium). Idempotent.
#
#   bash scripts/setup-console-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'setup-console-test: %s\n' "$*" >&2; }

# apt_install PKG...: Debian packages, with sudo when not root (scripts/apt.sh).
source scripts/apt.sh

pkgs=()
[[ -x /usr/bin/chromium ]] || pkgs+=(chromium)
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
if (( ${#pkgs[@]} )); then
  apt_install "${pkgs[@]}"
fi

dir=shell/console/tests/browser
if [[ -f $dir/node_modules/playwright-core/package.json ]] &&
   grep -q "\"version\": \"$(sed -n 's/.*"playwright-core": "\(.*\)".*/\1/p' $dir/package.json)\"" \
     $dir/node_modules/playwright-core/package.json; then
  log "playwright-core ok"
else
  log "npm ci in $dir"
  (cd $dir && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
log "chromium $(/usr/bin/chromium --version 2>/dev/null | sed 's/^Chromium //'), node $(node --version)"
