#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each, one after the other (bounded by
# libFuzzer's -max_total_time), for CI and for test.sh.
#
#   scripts/fuzz.sh SECONDS
#
# Needs a nightly toolchain (libFuzzer and the sanitizers are nightly-only). Without one it
# prints a SKIP line and exits 0, so a stable-only machine still passes. cargo-fuzz is
# installed from crates.io when missing. Corpora grow in fuzz/corpus/<target> and logs go
# to fuzz/target/fuzz-logs/; neither is in git. Exits non-zero when a target finds a crash,
# hang, leak or OOM, and prints the artifact's path and how to replay it.
#
# Environment: TERN_FUZZ_TIMEOUT_S (default 10) is libFuzzer's per-input limit: an input
# that runs longer counts as a hang. TERN_FUZZ_TARGETS (space-separated) runs a subset.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds="${1:-}"
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh SECONDS" >&2
  exit 2
fi
per_input_timeout="${TERN_FUZZ_TIMEOUT_S:-10}"

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "SKIP fuzz: no nightly toolchain (cargo +nightly unavailable); cargo-fuzz needs nightly"
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

if [[ -n "${TERN_FUZZ_TARGETS:-}" ]]; then
  read -r -a targets <<<"$TERN_FUZZ_TARGETS"
else
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
if [[ ${#targets[@]} -eq 0 ]]; then
  echo "no fuzz targets found" >&2
  exit 1
fi

echo "building ${#targets[@]} fuzz targets: ${targets[*]}"
cargo +nightly fuzz build

logs=target/fuzz-logs
mkdir -p "$logs"
failed=()
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  before=$(ls -1 "artifacts/$t")
  log="$logs/$t.log"
  echo "=== fuzz $t for ${seconds}s"
  status=0
  # The outer timeout is a backstop in case libFuzzer itself wedges; it should never fire.
  timeout --signal=KILL $((seconds + 300)) \
    cargo +nightly fuzz run "$t" -- \
      -max_total_time="$seconds" -timeout="$per_input_timeout" -print_final_stats=1 \
      >"$log" 2>&1 || status=$?
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || true)
  new_artifacts=$(comm -13 <(echo "$before" | sort) <(ls -1 "artifacts/$t" | sort) | sed '/^$/d')
  if [[ $status -ne 0 || -n "$new_artifacts" ]]; then
    echo "FAIL $t (exit $status, ${execs:-?} execs); log: fuzz/$log"
    grep -E 'panicked at|^SUMMARY|ERROR: libFuzzer' "$log" | head -5 || true
    for a in $new_artifacts; do
      echo "  artifact: fuzz/artifacts/$t/$a"
      echo "  replay:   (cd fuzz && cargo +nightly fuzz run $t artifacts/$t/$a)"
    done
    if [[ -z "$new_artifacts" ]]; then
      tail -20 "$log"
    fi
    failed+=("$t")
  else
    echo "ok   $t: ${execs:-?} execs, corpus $(ls -1 "corpus/$t" | wc -l) inputs"
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds}s without a finding"
