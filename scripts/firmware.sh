#!/usr/bin/env bash
# Builds targets/firmware (Tern's engine as a bare-metal Cortex-M4F image) and runs it under
# qemu-system-arm: puts, a power cut, recovery, checks. Proves the firmware path of
# targets/edge-arm.
#
#   scripts/firmware.sh
#
# Needs qemu-system-arm (Debian package qemu-system-arm); without it, prints a SKIP line and
# exits 0, so a machine without QEMU still passes. Installs the thumbv7em-none-eabihf Rust
# target when rustup lacks it. Exits non-zero when the build fails, the image reports a
# failed check, QEMU exits non-zero, the run exceeds TERN_FIRMWARE_TIMEOUT_S (default 60),
# or no `tern-firmware: ok` line appears. Builds into $CARGO_TARGET_DIR when set, else
# targets/firmware/target. Prints the image's size (flash and RAM) after the run.
set -euo pipefail
cd "$(dirname "$0")/../targets/firmware"

triple=thumbv7em-none-eabihf
machine=(-machine mps2-an386 -cpu cortex-m4)
timeout_s="${TERN_FIRMWARE_TIMEOUT_S:-60}"

if ! command -v qemu-system-arm >/dev/null 2>&1; then
  echo "SKIP firmware: qemu-system-arm not installed (apt-get install qemu-system-arm)"
  exit 0
fi
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$triple"; then
  rustup target add "$triple"
fi

echo "building tern-firmware ($triple, release)"
cargo build --release --quiet
target_dir="${CARGO_TARGET_DIR:-target}"
elf="$target_dir/$triple/release/tern-firmware"
if [[ ! -f "$elf" ]]; then
  echo "FAIL firmware: no image at $elf after the build" >&2
  exit 1
fi

mkdir -p "$target_dir"
log="$target_dir/firmware-run.log"
echo "running under qemu-system-arm ${machine[*]} (timeout ${timeout_s}s)"
status=0
# Semihosting carries the program's output to stdout and its exit status to QEMU's.
timeout --signal=KILL "$timeout_s" \
  qemu-system-arm "${machine[@]}" -nographic -monitor none -serial null \
    -semihosting-config enable=on,target=native -kernel "$elf" >"$log" 2>&1 || status=$?
cat "$log"

# The image's cost: berkeley-style text/data/bss (flash = text + data, RAM = data + bss).
print_size() {
  if command -v llvm-size >/dev/null 2>&1; then
    llvm-size "$elf"
  elif command -v size >/dev/null 2>&1 && size "$elf" >/dev/null 2>&1; then
    size "$elf"
  else
    python3 - "$elf" <<'PY'
import struct, sys
# ELF32 little-endian section headers; sums allocated sections the way `size` does.
data = open(sys.argv[1], "rb").read()
shoff, = struct.unpack_from("<I", data, 0x20)
shentsize, shnum = struct.unpack_from("<HH", data, 0x2E)
text = dat = bss = 0
for i in range(shnum):
    _, typ, flags, _, _, size = struct.unpack_from("<IIIIII", data, shoff + i * shentsize)
    if not flags & 0x2:          # SHF_ALLOC
        continue
    if typ == 8:                 # SHT_NOBITS
        bss += size
    elif flags & 0x1:            # SHF_WRITE
        dat += size
    else:
        text += size
print("   text\t   data\t    bss\tfilename")
print(f"{text:7}\t{dat:7}\t{bss:7}\t{sys.argv[1]}")
PY
  fi
}
echo "image size:"
print_size | sed 's/^/  /'
# Where the flash goes, by crate, from symbol names: approximate, since LTO inlines the
# engine's generic code into the program's functions (Store::open into the program's
# open, for one), so the engine's share is a lower bound.
if command -v llvm-nm >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then
  llvm-nm -S -C "$elf" | python3 -c '
import sys
crates = ["tern_firmware", "tern_engine", "crc32fast", "zerocopy", "heapless",
          "cortex_m_semihosting", "cortex_m_rt", "cortex_m", "static_cell", "core",
          "compiler_builtins"]
flash = {}
for line in sys.stdin:
    parts = line.rstrip("\n").split(None, 3)
    if len(parts) < 4 or parts[2] not in "tTrR":
        continue
    size, name = int(parts[1], 16), parts[3]
    # Local symbols keep the legacy mangling: a..b::c is written a..b..c.
    name = name.replace("..", "::")
    hits = [(name.find(c + "::"), c) for c in crates if c + "::" in name]
    if name in ("__INTERRUPTS", "Reset", "HardFault", "_HardFault") or name.startswith("__RESET"):
        owner = "cortex_m_rt"
    elif hits:
        owner = min(hits)[1]
    elif name.startswith("__aeabi") or name.startswith("__") or name.startswith("mem"):
        owner = "compiler_builtins"
    elif name.startswith(".L"):
        owner = "constants"
    else:
        owner = "other"
    flash[owner] = flash.get(owner, 0) + size
print("  flash by crate (code + read-only data, approximate):",
      ", ".join(f"{c} {n / 1024:.1f} KiB" for c, n in sorted(flash.items(), key=lambda x: -x[1])))
'
fi

if [[ $status -ne 0 ]]; then
  if [[ $status -eq 137 ]]; then
    echo "FAIL firmware: no exit within ${timeout_s}s (QEMU killed)" >&2
  else
    echo "FAIL firmware: QEMU exited with status $status" >&2
  fi
  exit 1
fi
if ! grep -q '^tern-firmware: ok ' "$log"; then
  echo "FAIL firmware: QEMU exited 0 but no 'tern-firmware: ok' line was printed" >&2
  exit 1
fi
echo "firmware: ok (log: $(realpath "$log"))"
