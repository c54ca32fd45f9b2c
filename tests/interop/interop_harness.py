"""The reporting and time-keeping both interop drivers share (cpp_interop.py drives Apache's
C++ client, grpc_interop.py its 5.x gRPC client), so that the two speak one verdict format:
PASS/FAIL lines for named checks on stdout, progress on stderr, and a last line
`N passed, M failed` (what the Rust tests read, tern_testkit::python::parse_verdict), under a
global deadline that guarantees a run never hangs.

The drivers are run as files (`python tests/interop/cpp_interop.py ...`), which puts this
folder first on sys.path: they import this module by name. Only the standard library is used
here, so argument errors and a missing venv still get a proper report.
"""

import os
import re
import secrets
import sys
import threading
import time

T0 = time.monotonic()

_lock = threading.Lock()
_results = []  # (name, ok, detail)
_done = threading.Event()


def settle_args(ap, args, prefix_base, prefix_max, scenarios):
    """What both drivers do with their parsed arguments alike (ap.error on a bad one): a run
    id (args.run) that makes group names new each run, the topic/group prefix (default
    prefix_base + run id; letters, digits, _ and -, at most prefix_max, as topic names allow),
    args.scenario_list all known `scenarios`, and an ACL account given whole or not at all."""
    args.run = secrets.token_hex(3)
    if args.prefix is None:
        args.prefix = prefix_base + args.run
    form = r"[A-Za-z0-9_-]{1,%d}" % prefix_max
    if not re.fullmatch(form, args.prefix):
        ap.error("--prefix must match %s" % form)
    unknown = [s for s in args.scenario_list if s not in scenarios]
    if unknown:
        ap.error("unknown scenario(s) %s; known: %s" % (unknown, ",".join(scenarios)))
    if bool(args.access_key) != bool(args.secret_key):
        ap.error("--access-key and --secret-key go together")


def progress(msg):
    print("[%6.1fs] %s" % (time.monotonic() - T0, msg), file=sys.stderr, flush=True)


def check(name, ok, detail=""):
    with _lock:
        _results.append((name, bool(ok), detail))
    line = ("PASS " + name) if ok else ("FAIL " + name + (": " + detail if detail else ""))
    print(line, flush=True)
    return ok


def summary_and_exit(extra_fail=None):
    """Prints the summary line and leaves at once (os._exit: neither client's threads may keep
    the process alive: the C++ client's destructors can block at interpreter exit and a hung
    consumer would stay, the 5.x client's gRPC threads and schedulers would keep a failed run
    going)."""
    with _lock:
        if _done.is_set():
            return
        _done.set()
        if extra_fail:
            _results.append((extra_fail[0], False, extra_fail[1]))
            print("FAIL %s: %s" % extra_fail, flush=True)
        passed = sum(1 for r in _results if r[1])
        failed = len(_results) - passed
        if failed:
            print("failed checks:", file=sys.stderr)
            for name, ok, detail in _results:
                if not ok:
                    print("  - %s: %s" % (name, detail), file=sys.stderr)
        print("%d passed, %d failed" % (passed, failed), flush=True)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1 if failed else 0)


def run_main(parse_args, run, argv):
    """A driver's whole run: its arguments parsed, the global deadline armed, run(args,
    deadline) and the summary, which ends the process (whatever run left going)."""
    args = parse_args(argv)
    run(args, start_deadline(args.deadline))
    summary_and_exit()


def client_loads(load, what):
    """Whether load() (the driver's late import of its client: argument errors show without
    the venv) works; a failed check when it does not."""
    try:
        load()
        return True
    except Exception as e:  # noqa: BLE001 - reported as the failed check
        check("import rocketmq (%s)" % what, False, repr(e))
        return False


class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()

    def budget(self, want, reserve=10.0):
        """At most `want` seconds, keeping `reserve` seconds for shutdowns and the report."""
        return max(0.0, min(want, self.left() - reserve))


def start_deadline(seconds):
    """The run's Deadline of `seconds`, armed: when it passes, whatever still runs, the checks
    so far are reported with a `global deadline` failure and the process exits."""
    dl = Deadline(seconds)

    def on_deadline():
        progress("GLOBAL DEADLINE (%.0fs) passed" % seconds)
        summary_and_exit(("global deadline", "still running after %.0fs" % seconds))

    timer = threading.Timer(seconds, on_deadline)
    timer.daemon = True
    timer.start()
    return dl


def sample(xs, n=5):
    xs = list(xs)
    return "%s%s" % (xs[:n], " ... (%d in all)" % len(xs) if len(xs) > n else "")


def bounded(fn, seconds, what):
    """Runs fn in a daemon thread; (True, result) or (False, error text) if it raised or did
    not return in time (then it is abandoned: a client call can block for good)."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:  # noqa: BLE001 - reported by the caller
            out["error"] = e

    t = threading.Thread(target=run, daemon=True, name=what)
    t.start()
    t.join(seconds)
    if t.is_alive():
        progress("%s did not return within %.0fs (abandoned)" % (what, seconds))
        return False, "did not return within %.0fs" % seconds
    if "error" in out:
        progress("%s raised %s: %s" % (what, type(out["error"]).__name__, out["error"]))
        return False, "%s: %s" % (type(out["error"]).__name__, out["error"])
    return True, out.get("value")
