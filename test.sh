#!/usr/bin/env bash
# Runs Tern's whole test suite. Installs what it needs first (idempotent), so it works on a
# fresh machine: the no_std and ARM targets, Debian's cross linkers and qemu (user mode
# for the edge gateway, system mode for the firmware image), the Python venv with
# Apache's C++ client for the interop tests, Chromium and playwright-core for the web
# console's browser test, and cargo-fuzz when a nightly toolchain is present.
#
#   ./test.sh            everything (about 32 minutes on 2 cores, fresh machine)
#   ./test.sh --quick    skip fuzzing and the long crash simulation
set -euo pipefail
cd "$(dirname "$0")"

quick=0
[[ "${1:-}" == "--quick" ]] && quick=1

# Each step's header says when it began (seconds since the start): CI's log then shows
# where its time goes.
step() { printf '\n=== [%ds] %s\n' "$SECONDS" "$*"; }

step "toolchain"
# thumbv7em: the engine's no_std build and the firmware image; aarch64 and armv7: the edge
# gateway's cross builds, run under qemu-user.
for t in thumbv7em-none-eabihf aarch64-unknown-linux-gnu armv7-unknown-linux-gnueabihf; do
  rustup target list --installed | grep -qx "$t" || rustup target add "$t"
done
# Cross linkers and emulators (Debian packages). A machine that cannot install them fails
# here: the ARM tests must run, not be skipped.
pkgs=()
command -v aarch64-linux-gnu-gcc >/dev/null || pkgs+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
command -v arm-linux-gnueabihf-gcc >/dev/null || pkgs+=(gcc-arm-linux-gnueabihf libc6-dev-armhf-cross)
{ command -v qemu-aarch64 >/dev/null && command -v qemu-arm >/dev/null; } || pkgs+=(qemu-user)
command -v qemu-system-arm >/dev/null || pkgs+=(qemu-system-arm)
# tern-bench's tls scenario makes its certificates with the openssl commands of docs/tls.md.
command -v openssl >/dev/null || pkgs+=(openssl)
if (( ${#pkgs[@]} )); then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}"
fi

if [[ -f scripts/setup-python.sh ]]; then
  step "python venv for interop tests (rocketmq==0.4.4, Apache's C++ client)"
  bash scripts/setup-python.sh
fi
if [[ -f scripts/setup-python-grpc.sh ]]; then
  step "python venv for gRPC interop tests (rocketmq-python-client==5.1.2, Apache's 5.x client)"
  bash scripts/setup-python-grpc.sh
fi

if [[ -f scripts/setup-console-test.sh ]]; then
  step "browser for the web console's test (Debian chromium, playwright-core from npm)"
  bash scripts/setup-console-test.sh
fi

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# A package with `autotests = false` runs a tests/*.rs file only when its tests/suite.rs
# declares it as a module or its Cargo.toml names it in a [[test]]: one that does neither
# would never compile, let alone fail.
for manifest in $(grep -l '^autotests = false' -- */Cargo.toml */*/Cargo.toml); do
  pkg=$(dirname "$manifest")
  for f in "$pkg"/tests/*.rs; do
    m=$(basename "$f" .rs)
    [[ $m == suite ]] && continue
    if ! grep -qx "mod $m;" "$pkg/tests/suite.rs" && ! grep -qx "path = \"tests/$m.rs\"" "$manifest"; then
      echo "$f is in neither $pkg/tests/suite.rs nor a [[test]] of $manifest: it would never run" >&2
      exit 1
    fi
  done
done

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
# The test binaries three at a time, longest first (scripts/run-tests.py: most of them wait on
# real processes and timers, so one at a time leaves 2 cores idle). No doc tests: an example
# that must compile is a unit test (`cargo test --doc` alone resolves other features and
# rebuilt the libraries, 2.5 minutes for one example).
mkdir -p target
python3 scripts/run-tests.py -j 3 -- --workspace --release 2>&1 | tee target/test-output.log
step "edge gateway device build (profile edge): its footprint natively, then cross-built for aarch64 and armv7 with its process tests under qemu-user"
# The device build (Cargo.toml's [profile.edge]: LTO, one codegen unit, opt-level "s",
# stripped, panic=abort) must stay under 4.5 MiB (docs/tern-edge.md "Building for a device";
# 4 MiB until TLS, whose rustls and ring put the aarch64 build at about 4.07 MiB).
edge_max_bytes=$((9 << 19))
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
# The device build natively (the idle-RSS goal, < 8 MiB, is the device build's) and for
# both ARM targets in one cargo run: each build's long single-threaded tail (one codegen
# unit per crate, then fat LTO) overlaps the others' instead of leaving a core idle.
host=$(rustc -vV | sed -n 's/^host: //p')
cargo build --profile edge -p tern-edge --target "$host" \
  --target aarch64-unknown-linux-gnu --target armv7-unknown-linux-gnueabihf
# The gateway's test binary is the one the tests step built (run-tests.py --only), not
# `cargo test -p tern-edge`, which would resolve tern-edge's features alone and rebuild.
edge_suite() { python3 scripts/run-tests.py --only edge-arm/test/suite "$@" -- --workspace --release; }
TERN_EDGE_BIN="$target_dir/$host/edge/tern-edge" \
  edge_suite --test-args footprint:: 2>&1 | tee -a target/test-output.log
for spec in "aarch64-unknown-linux-gnu qemu-aarch64 /usr/aarch64-linux-gnu aarch64" \
            "armv7-unknown-linux-gnueabihf qemu-arm /usr/arm-linux-gnueabihf arm"; do
  read -r triple runner sysroot arch <<<"$spec"
  bin="$target_dir/$triple/edge/tern-edge"
  size=$(stat -c %s "$bin")
  echo "tern-edge for $triple: $size bytes"
  if (( size >= edge_max_bytes )); then
    echo "tern-edge for $triple is $size bytes, over the 4.5 MiB goal" >&2
    exit 1
  fi
  # Every process test of the gateway (the one binary `suite`), against this build.
  TERN_EDGE_ARCH="$arch" TERN_EDGE_BIN="$bin" TERN_EDGE_RUNNER="$runner -L $sysroot" \
    edge_suite 2>&1 | tee -a target/test-output.log
done

step "firmware: the engine on a Cortex-M4F under qemu-system-arm"
bash scripts/firmware.sh

# A summary line the CI reader understands.
passed=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' target/test-output.log | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/test-output.log | awk '{s+=$1} END {print s+0}')

step "benchmark smoke: tern-bench --quick (every scenario, small counts, no thresholds)"
# The binaries the tests built (tern-bench, tern-broker, tern-edge): `cargo run -p tern-bench`
# would build them again for tern-bench's own feature set.
TERN_BENCH_NO_BUILD=1 "$target_dir/release/tern-bench" --quick

if [[ $quick == 0 ]] && [[ -d fuzz ]]; then
  step "fuzz (bounded)"
  # 10 s per target: a smoke run that each decoder still survives its corpus and fresh
  # inputs; long runs are scripts/fuzz.sh with a larger budget.
  bash scripts/fuzz.sh 10
fi

step "done"
echo "cargo: ${passed} passed, ${failed} failed"
