#!/usr/bin/env bash
# Runs Tern's whole test suite. Installs what it needs first (idempotent), so it works on a
# fresh machine: the no_std target, the Python venv with Apache's C++ client for the
# interop tests, and cargo-fuzz when a nightly toolchain is present.
#
#   ./test.sh            everything (about 10-15 minutes on 2 cores)
#   ./test.sh --quick    skip fuzzing and the long crash simulation
set -euo pipefail
cd "$(dirname "$0")"

quick=0
[[ "${1:-}" == "--quick" ]] && quick=1

step() { printf '\n=== %s\n' "$*"; }

step "toolchain"
rustup target list --installed | grep -q thumbv7em-none-eabihf || rustup target add thumbv7em-none-eabihf

if [[ -f scripts/setup-python.sh ]]; then
  step "python venv for interop tests (rocketmq==0.4.4, Apache's C++ client)"
  bash scripts/setup-python.sh
fi

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

step "no_std build of the engine (thumbv7em-none-eabihf)"
cargo build -p tern-engine --target thumbv7em-none-eabihf
if cargo tree -e normal -p tern-engine --target thumbv7em-none-eabihf | grep -E '\bstd\b|alloc' ; then
  echo "tern-engine must not depend on std or alloc" >&2
  exit 1
fi

step "tests"
# The interop tests fail rather than skip when the real C++ client is missing.
export TERN_REQUIRE_INTEROP=1
if [[ $quick == 1 ]]; then
  export TERN_SIM_CASES=300
else
  export TERN_SIM_CASES="${TERN_SIM_CASES:-5000}"
fi
cargo test --workspace --release 2>&1 | tee target/test-output.log
# A summary line the CI reader understands.
passed=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' target/test-output.log | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/test-output.log | awk '{s+=$1} END {print s+0}')

step "benchmark smoke: tern-bench --quick (every scenario, small counts, no thresholds)"
cargo run --release -p tern-bench -- --quick

if [[ $quick == 0 ]] && [[ -d fuzz ]]; then
  step "fuzz (bounded)"
  bash scripts/fuzz.sh 30
fi

echo
echo "cargo: ${passed} passed, ${failed} failed"
