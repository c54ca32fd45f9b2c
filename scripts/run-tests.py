#!/usr/bin/env python3
"""Runs the workspace's test binaries several at a time, longest first.

    scripts/run-tests.py [-j N] [--timeout-s S] [--times FILE] -- CARGO_TEST_ARGS...
    scripts/run-tests.py --only NAME [--test-args 'ARGS'] -- CARGO_TEST_ARGS...

`cargo test` runs its test binaries one after the other. Most of Tern's binaries spend
their time waiting on real processes, sockets and timers (broker restarts, long polls,
kill -9 loops), so on CI's 2 cores one binary at a time leaves the machine mostly idle.
This builds what `cargo test CARGO_TEST_ARGS --no-run` builds, runs each test binary as
cargo would (its package folder as the working directory, cargo's variables set), N at
once, and prints each binary's whole output in one block when it ends, under cargo's
"Running" header, so the log reads like cargo's and test.sh counts its "test result"
lines the same way. Doc tests are not run (the workspace keeps its compiled examples as
unit tests).

The longest binaries start first, by the durations of the last run (kept in --times,
default target/test-times.json), else by scripts/test-times.json (a run's times, checked
in, so a fresh clone starts the long ones first); a binary with neither starts before
all of them, since it may be a new long one. Exits 1 when a binary fails or exceeds
--timeout-s (killed, with its output so far), after every other binary has finished,
and lists them last.

--only runs the one binary NAME (as the log names it, e.g. edge-arm/test/suite) with
--test-args (split on spaces: test filters, --exact…), after the same build: test.sh runs
the gateway's tests against its device builds so, where `cargo test -p tern-edge` would
resolve tern-edge's own features and rebuild half the workspace. Its time is not kept.
"""

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time


def build(cargo_args):
    """Builds the test binaries; returns [(name, executable, package dir)]."""
    cmd = [os.environ.get("CARGO", "cargo"), "test", *cargo_args, "--no-run",
           "--message-format=json-render-diagnostics"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"run-tests: {' '.join(cmd)} failed ({proc.returncode})")
    binaries = []
    for line in proc.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg["profile"]["test"]:
            continue
        target = msg["target"]
        package_dir = os.path.dirname(msg["manifest_path"])
        kind = target["kind"][0]
        name = f"{os.path.basename(package_dir)}/{kind}/{target['name']}"
        binaries.append((name, msg["executable"], package_dir))
    return binaries


def run_one(binary, timeout_s, test_args=()):
    name, exe, package_dir = binary
    env = dict(os.environ, CARGO_MANIFEST_DIR=package_dir)
    start = time.monotonic()
    proc = subprocess.Popen([exe, *test_args], cwd=package_dir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        status = proc.returncode
    except subprocess.TimeoutExpired:
        # The whole session: a test's broker children go with it.
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        out += f"\nrun-tests: {name} killed after {timeout_s} s\n"
        status = "timeout"
    return status, out, time.monotonic() - start


def show(binary, secs, out):
    """One binary's whole output under cargo's header, flushed as one block."""
    print(f"     Running {binary[0]} ({binary[1]}), {secs:.1f} s")
    sys.stdout.write(out)
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", type=int, default=3, help="binaries at once (default 3)")
    parser.add_argument("--timeout-s", type=int, default=1500)
    parser.add_argument("--times", default="target/test-times.json")
    parser.add_argument("--only", metavar="NAME")
    parser.add_argument("--test-args", default="")
    parser.add_argument("cargo_args", nargs="*")
    args = parser.parse_args()

    binaries = build(args.cargo_args)
    if args.only:
        chosen = [b for b in binaries if b[0] == args.only]
        if not chosen:
            sys.exit(f"run-tests: no test binary {args.only} among: "
                     + ", ".join(b[0] for b in binaries))
        status, out, secs = run_one(chosen[0], args.timeout_s, args.test_args.split())
        show(chosen[0], secs, out)
        sys.exit(0 if status == 0 else 1)
    times = {}
    seed = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test-times.json")
    for path in (seed, args.times):
        try:
            with open(path) as f:
                times.update(json.load(f))
        except (OSError, ValueError):
            pass
    binaries.sort(key=lambda b: -times.get(b[0], float("inf")))

    work = queue.Queue()
    for b in binaries:
        work.put(b)
    lock = threading.Lock()
    failed = []
    took = {}

    def worker():
        while True:
            try:
                b = work.get_nowait()
            except queue.Empty:
                return
            status, out, secs = run_one(b, args.timeout_s)
            with lock:
                took[b[0]] = round(secs, 1)
                show(b, secs, out)
                if status != 0:
                    failed.append(f"{b[0]}: {status}")

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(max(1, args.j))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    times.update(took)
    os.makedirs(os.path.dirname(args.times) or ".", exist_ok=True)
    with open(args.times, "w") as f:
        json.dump(times, f, indent=1, sort_keys=True)
    print(f"\nrun-tests: {len(binaries)} binaries, -j {args.j}, "
          f"{time.monotonic() - start:.0f} s; the longest:")
    for name, secs in sorted(took.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {secs:8.1f} s  {name}")
    if failed:
        print("run-tests: failed binaries:\n  " + "\n  ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
