#!/usr/bin/env python3
"""Interop scenarios for Tern, driven by the REAL C++ RocketMQ client.

The client is PyPI `rocketmq==0.4.4`, which bundles Apache's librocketmq.so
(rocketmq-client-cpp 1.2.x). Create the venv with `bash scripts/setup-python.sh` and run
with HOME pointing at a scratch folder (the C++ client writes $HOME/logs/rocketmq-cpp).

    .venv/bin/python tests/interop/cpp_interop.py --namesrv 127.0.0.1:9876 [--prefix P]

Each scenario uses its own topic, PREFIX-<suffix>, and its own consumer groups:

    sync     a. the topic is created by the first send (auto-creation from TBW102, as
                RocketMQ users do it) or, with --precreated, exists beforehand;
             b. 1,000 sync sends with keys, tags TagA/TagB/TagC round-robin and a user
                property, each SEND_OK with a msg id (a few bodies > 4 KiB, so compressed);
             c. a CLUSTERING push consumer in a new group subscribed to `TagA || TagB`
                receives every TagA/TagB message and no TagC, everything intact; the
                same group restarted gets only what was sent since (committed offsets).
    oneway   d. oneway sends land (consumed back).
    orderly  e. send_orderly with a sharding arg; an orderly push consumer sees each queue
                in send order (per-queue increasing sequence numbers).
    batch    f. send_batch lands (consumed back).
    delay    g. messages sent with set_delay_time_level arrive after their level's delay
                (per --delay-levels, the broker's messageDelayLevel), each once, intact;
             h. a message whose consume callback raises (RECONSUME_LATER) comes back from
                the group's retry topic after the retry level's delay (3 + reconsume
                times), with reconsume_times 1.
    timer    j. RocketMQ 5 timer messages: TIMER_DELAY_SEC=3, TIMER_DELAY_MS=1500 and an
                absolute TIMER_DELIVER_MS (now + 5 s) set with set_property arrive at the
                push consumer no earlier than due (its clock and the copy's store time),
                each once, intact, with the send's msg id, TIMER_OUT_MS / ENQUEUE / DEQUEUE
                set and no REAL_TOPIC.
    dedup    i. (not in the default list: the broker needs duplicateCheckWindowSeconds)
                each message the C++ producer sent is sent again with its UNIQ_KEY (a
                stdlib SEND_MESSAGE: the C++ client overwrites a UNIQ_KEY property):
                answered with the first queue offset, stored once, consumed once.

Prints PASS/FAIL lines for named checks on stdout, progress on stderr, and ends with the
line `N passed, M failed`; exits 1 if anything failed. A global deadline (--deadline)
guarantees it never hangs: when it passes, the checks so far are reported with a failure.

Helper modes for the restart tests (the Rust harness in shell/broker/tests/interop_cpp.rs)
and for grpc_interop.py's cross scenario (5.x client <-> this 4.x client):

    --send-only --topic T --count N [--big B]
                                         sync-sends N messages (keys T-k0..), printing
                                         `ACK <key> <msgId> <queueOffset>` per SEND_OK;
                                         with --big, every tenth body is B bytes longer
    --consume-only --topic T --expect-keys FILE
                                         push-consumes (new group) until every key listed
                                         in FILE (one a line) arrived with its body intact
    --dump-only --topic T --expect-keys FILE
                                         the same, printing each message as `GOT <json>`
                                         (key, tags, body, property, UNIQ_KEY, msg id)

Only the standard library, the rocketmq package and interop_harness.py (beside this file:
the PASS/FAIL lines, the summary and the deadline, shared with grpc_interop.py) are used.
Before starting the C++ client (whose start() blocks ~20 s when no name server answers), the
name server is probed with a tiny stdlib remoting client, which also reads topic routes.
"""

import argparse
import json
import os
import re
import socket
import struct
import sys
import threading
import time

# Run as a file, this script's folder is first on sys.path already; put there again for a
# Python told to leave it out (-P, PYTHONSAFEPATH), as the shared harness lives beside it.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from interop_harness import (  # noqa: E402 - after the sys.path line above
    bounded, check, client_loads, progress, run_main, sample, settle_args,
)

TAGS = ("TagA", "TagB", "TagC")
PROP = "interop"


# ---------------------------------------------------------------------------------------
# A minimal RocketMQ remoting client (JSON headers), stdlib only.
# ---------------------------------------------------------------------------------------

GET_ROUTEINFO_BY_TOPIC = 105
TOPIC_NOT_EXIST = 17


class RemotingError(Exception):
    pass


def remoting_call(addr, code, ext=None, body=b"", timeout=5.0):
    """One request/response on a fresh connection. Returns (code, remark, extFields, body)."""
    host, port = addr.rsplit(":", 1)
    header = json.dumps({
        "code": code, "language": "JAVA", "version": 479, "opaque": 1, "flag": 0,
        "remark": "", "extFields": {k: str(v) for k, v in (ext or {}).items()},
        "serializeTypeCurrentRPC": "JSON",
    }).encode()
    frame = struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(frame)
        while True:
            total = struct.unpack(">i", _recv_exact(s, 4))[0]
            if total < 4 or total > 16 * 1024 * 1024:
                raise RemotingError("bad frame length %d" % total)
            rest = _recv_exact(s, total)
            mark = struct.unpack(">I", rest[:4])[0]
            kind, hlen = mark >> 24, mark & 0xFFFFFF
            if kind != 0:
                raise RemotingError("response header is not JSON (serialize type %d)" % kind)
            h = json.loads(rest[4:4 + hlen])
            if h.get("opaque") != 1 or not (h.get("flag", 0) & 1):
                continue  # a request from the server, not our answer
            return h.get("code"), h.get("remark"), h.get("extFields") or {}, rest[4 + hlen:]


def _recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise RemotingError("connection closed")
        buf += chunk
    return buf


def parse_lenient_json(raw):
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        # fastjson's unquoted numeric map keys ({0:"addr"}), as sent to old clients.
        return json.loads(re.sub(r'([{,])\s*(-?\d+)\s*:', r'\1"\2":', text))


def get_route(namesrvs, topic):
    """The topic's route from the first name server that has it, or None (17 everywhere)."""
    last_err = None
    for ns in namesrvs:
        try:
            code, remark, _, body = remoting_call(ns, GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        except (OSError, RemotingError, ValueError) as e:
            last_err = "%s: %s" % (ns, e)
            continue
        if code == 0 and body:
            return parse_lenient_json(body)
        if code != TOPIC_NOT_EXIST:
            last_err = "%s answered code %s (%s)" % (ns, code, remark)
    if last_err and all_unreachable(namesrvs):
        raise RemotingError(last_err)
    return None


def all_unreachable(namesrvs):
    for ns in namesrvs:
        host, port = ns.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return False
        except OSError:
            pass
    return True


def route_ok(route, readable_only=False):
    """Readable + writable queues and a master address: what producers and consumers need.
    With readable_only, readable queues and any broker address (a slave serves reads)."""
    if not route:
        return False
    qd = route.get("queueDatas") or []
    bd = route.get("brokerDatas") or []
    if readable_only:
        return any(q.get("readQueueNums", 0) > 0 for q in qd) and any(b.get("brokerAddrs") for b in bd)
    masters = [b for b in bd if "0" in {str(k) for k in (b.get("brokerAddrs") or {})}]
    return any(q.get("readQueueNums", 0) > 0 and q.get("writeQueueNums", 0) > 0 for q in qd) and bool(masters)


def route_summary(route):
    if not route:
        return "no route"
    qd = [(q.get("brokerName"), q.get("readQueueNums"), q.get("writeQueueNums"), q.get("perm"))
          for q in route.get("queueDatas") or []]
    bd = [(b.get("brokerName"), b.get("brokerAddrs")) for b in route.get("brokerDatas") or []]
    return "queues(broker,r,w,perm)=%s brokers=%s" % (qd, bd)


def wait_route(namesrvs, topic, seconds, readable_only=False):
    end = time.monotonic() + seconds
    route = None
    while True:
        try:
            route = get_route(namesrvs, topic)
        except RemotingError:
            route = None
        if route_ok(route, readable_only) or time.monotonic() >= end:
            return route
        time.sleep(0.2)


def routed(args, dl, topic, name, seconds=15, readable_only=False):
    """Waits up to `seconds` (of the deadline's budget) for `topic`'s route and checks that it
    serves (route_ok); `name` is the check's, %s in it the topic. Returns the route."""
    route = wait_route(args.ns_list, topic, dl.budget(seconds), readable_only)
    check(name % topic, route_ok(route, readable_only), route_summary(route))
    return route


def queue_count(route):
    return sum(q.get("readQueueNums", 0) for q in (route or {}).get("queueDatas") or [])


# ---------------------------------------------------------------------------------------
# The C++ client, with bounded shutdowns.
# ---------------------------------------------------------------------------------------

def rmq():
    from rocketmq import client  # imported late: argument errors show without the venv
    return client


def finished(fn, seconds, what):
    """True when fn returned within `seconds` without raising: bounded() less its error text,
    which it logs and the C++ steps do not report."""
    return bounded(fn, seconds, what)[0]


def with_credentials(args, client):
    """Signs the client's requests (RocketMQ ACL) when --access-key was given."""
    if args.access_key:
        client.set_session_credentials(args.access_key, args.secret_key, "ALIYUN")


def make_producer(args, group):
    c = rmq()
    p = c.Producer(group, timeout=args.send_timeout_ms)
    p.set_namesrv_addr(args.namesrv)
    with_credentials(args, p)
    if not finished(p.start, 30, "producer start"):
        raise RuntimeError("producer %s did not start" % group)
    return p


def cpp_log_tail(lines=40):
    """The last lines of the C++ client's newest log file: what it was doing when a call
    hung (its shutdown waits on its rebalance and pull threads)."""
    folder = os.path.join(os.environ.get("HOME", "."), "logs", "rocketmq-cpp")
    try:
        files = [os.path.join(folder, f) for f in os.listdir(folder)]
        newest = max(files, key=os.path.getmtime)
        with open(newest, "rb") as f:
            tail = f.read()[-20000:].decode("utf-8", "replace").splitlines()[-lines:]
        return "%s:\n%s" % (newest, "\n".join(tail))
    except (OSError, ValueError) as e:
        return "no C++ client log in %s (%s)" % (folder, e)


def stop(obj, what):
    if finished(obj.shutdown, 20, what):
        return True
    for line in cpp_log_tail().splitlines():
        progress("  cpp-log| " + line)
    return False


def decode(b):
    if b is None:
        return None
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)


class Collector:
    """Push-consumer callback target: records every delivery (when it came, its fields,
    the timer properties the broker set), keyed by message key."""

    def __init__(self, expected_keys=()):
        self.lock = threading.Lock()
        self.seen = []  # dicts, in delivery order
        self.by_key = {}
        self.expected = set(expected_keys)
        self.all_arrived = threading.Event()
        self.errors = []
        if not self.expected:
            self.all_arrived.set()

    def __call__(self, msg):
        at = time.time()
        try:
            rec = {
                "at": at,  # when the callback came, by this process's clock
                "store_ms": msg.store_timestamp,
                "key": decode(msg.keys),
                "tags": decode(msg.tags),
                "body": msg.body,
                "prop": decode(msg.get_property(PROP)),
                "seq": decode(msg.get_property("seq")),
                "shard": decode(msg.get_property("shard")),
                "queue_id": msg.queue_id,
                "queue_offset": msg.queue_offset,
                "msg_id": msg.id,
                "reconsume_times": msg.reconsume_times,
                "topic": msg.topic,
            }
            for k in ("TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "REAL_TOPIC", "UNIQ_KEY"):
                rec[k] = decode(msg.get_property(k))
        except Exception as e:  # never ask for a reconsume because of our own bug
            with self.lock:
                self.errors.append(repr(e))
            return
        with self.lock:
            self.seen.append(rec)
            self.by_key.setdefault(rec["key"], []).append(rec)
            if self.expected and self.expected.issubset(self.by_key.keys()):
                self.all_arrived.set()

    def missing(self):
        with self.lock:
            return sorted(self.expected - set(self.by_key), key=_natural)

    def check_all_arrived(self, name, also=True, shown=5):
        """The check `name`: every expected key arrived (and `also` holds); the detail lists
        (`shown` of) the missing ones."""
        missing = self.missing()
        check(name, not missing and also, "missing %d: %s" % (len(missing), sample(missing, shown)))

    def duplicates(self):
        with self.lock:
            return sum(len(v) - 1 for v in self.by_key.values() if len(v) > 1)


def _natural(s):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s or "")]


def push_consumer(args, topic, group, listener, expression="*", orderly=False, instance=None, threads=None):
    """A CLUSTERING push consumer of `group` on `topic`, calling `listener`, not started:
    signed when --access-key was given, in a client instance of its own (`instance`, default
    the group's name), with `threads` consume threads (default: one per CPU)."""
    c = rmq()
    consumer = c.PushConsumer(group, orderly=orderly, message_model=c.MessageModel.CLUSTERING)
    consumer.set_namesrv_addr(args.namesrv)
    with_credentials(args, consumer)
    consumer.set_instance_name(instance or group)  # own client instance: no shared state
    if threads:
        consumer.set_thread_count(threads)
    consumer.subscribe(topic, listener, expression)
    return consumer


def start_consumer(consumer, seconds, label, group):
    """Starts a push consumer within `seconds`; False after a failed check (`label`: ...)."""
    if finished(consumer.start, seconds, "consumer start"):
        return True
    check("%s: consumer %s starts" % (label, group), False, "start failed or hung")
    return False


def stop_consumer(consumer, topic, group):
    """Shuts a push consumer down; a failed check when that hangs or fails."""
    if not stop(consumer, "consumer %s shutdown" % group):
        check("%s: consumer %s shuts down" % (topic, group), False, "shutdown hung or failed")


def consume(args, dl, topic, group, expression, expected_keys, orderly=False, want=None, instance=None,
            threads=None):
    """Starts a push consumer, waits until every expected key arrived (or the budget runs
    out), plus a short grace to catch strays, then shuts it down. Returns the Collector.
    `threads` sets the client's consume threads (default: one per CPU)."""
    col = Collector(expected_keys)
    consumer = push_consumer(args, topic, group, col, expression, orderly, instance, threads)
    wait = dl.budget(want if want is not None else args.consume_timeout)
    progress("consumer %s (%s, %s) on %s: waiting up to %.0fs for %d messages"
             % (group, "orderly" if orderly else "concurrent", expression, topic, wait, len(col.expected)))
    t = time.monotonic()
    if not start_consumer(consumer, min(30, max(wait, 1)), topic, group):
        return col
    col.all_arrived.wait(wait)
    took = time.monotonic() - t
    if col.all_arrived.is_set():
        time.sleep(min(args.grace, max(0, dl.left() - 10)))
        progress("consumer %s: all %d arrived in %.1fs (%d deliveries)"
                 % (group, len(col.expected), took, len(col.seen)))
    else:
        progress("consumer %s: %d of %d after %.1fs" % (group, len(col.expected) - len(col.missing()),
                                                         len(col.expected), took))
    stop_consumer(consumer, topic, group)
    return col


# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------

def scenario_topic(args, dl, name, label):
    """The topic of scenario `name`, PREFIX-name; with --precreated, first checked (check
    names start with `label`) to have a route already."""
    topic = "%s-%s" % (args.prefix, name)
    if args.precreated:
        routed(args, dl, topic, label + ": precreated topic %s has a route", 10)
    return topic


def make_msg(topic, key, tag, body, props):
    m = rmq().Message(topic)
    m.set_keys(key)
    if tag:
        m.set_tags(tag)
    m.set_body(body)
    for k, v in props.items():
        m.set_property(k, v)
    return m


def sync_sent(producer, msg, key, failures):
    """send_sync of the message `key`: the result when SEND_OK, else None after adding why to
    `failures`."""
    try:
        r = producer.send_sync(msg)
    except Exception as e:  # noqa: BLE001 - the caller's check reports the failures
        failures.append("%s: %s" % (key, e))
        return None
    if int(r.status) != 0:
        failures.append("%s: status=%s" % (key, r.status))
        return None
    return r


def sync_body(i):
    # A few bodies above the client's 4 KiB compression threshold (sysFlag compressed).
    return "sync %d \u00e9t\u00e9 " % i + ("x" * 5000 if i % 100 == 7 else "")


def scenario_sync(args, dl, producer):
    topic = args.prefix + "-sync"
    n = args.count
    sent = {}  # key -> (tag, body, prop)
    failures = []
    ids = []

    def send(i):
        key = "%s-k%d" % (topic, i)
        tag = TAGS[i % 3]
        body = sync_body(i)
        prop = "p-%d" % i
        try:
            r = producer.send_sync(make_msg(topic, key, tag, body, {PROP: prop, "seq": str(i)}))
        except Exception as e:  # noqa: BLE001
            failures.append("#%d: %s" % (i, str(e).splitlines()[0] if str(e) else repr(e)))
            return False
        if int(r.status) != 0 or not r.msg_id:
            failures.append("#%d: status=%s msg_id=%r" % (i, r.status, r.msg_id))
            return False
        sent[key] = (tag, body.encode("utf-8"), prop)
        ids.append(r.msg_id)
        return True

    # a. topic creation
    before = None
    if args.precreated:
        before = wait_route(args.ns_list, topic, dl.budget(10))
        ok = route_ok(before)
        detail = route_summary(before)
        if ok and args.expect_queues:
            ok = queue_count(before) == args.expect_queues
            detail = "expected %d queues; %s" % (args.expect_queues, detail)
        check("a.create: precreated topic %s has a route" % topic, ok, "" if ok else detail)
    else:
        try:
            before = get_route(args.ns_list, topic)
        except RemotingError:
            before = None
        if before:
            progress("note: %s already has a route (leftover from an earlier run?)" % topic)
    first_ok = send(0)
    check("a.create: first send to %s is SEND_OK%s" % (topic, "" if args.precreated else " (auto-created via TBW102)"),
          first_ok, failures[0] if failures else "")
    route = routed(args, dl, topic, "a.create: name server has a readable+writable route for %s",
                   15 if first_ok else 2)
    progress("route %s: %s" % (topic, route_summary(route)))
    if not first_ok:
        check("b.sync: %d sends" % n, False, "skipped: the first send failed")
        return

    # b. 1,000 sync sends
    t = time.monotonic()
    consecutive = 0
    for i in range(1, n):
        if dl.left() < 30:
            failures.append("stopped at #%d: global deadline near" % i)
            break
        if send(i):
            consecutive = 0
        else:
            consecutive += 1
            if consecutive >= 5:
                failures.append("stopped at #%d after 5 consecutive failures" % i)
                break
    took = time.monotonic() - t
    progress("sync: %d/%d SEND_OK in %.1fs" % (len(sent), n, took))
    check("b.sync: %d sync sends return SEND_OK with a msg id" % n, len(sent) == n and not failures,
          "%d ok; failures: %s" % (len(sent), sample(failures, 3)))
    check("b.sync: msg ids are distinct", len(set(ids)) == len(ids),
          "%d ids, %d distinct" % (len(ids), len(set(ids))))

    # c. tag-filtered push consumer
    want = {k for k, v in sent.items() if v[0] in ("TagA", "TagB")}
    group = "%s_%s_tags" % (args.prefix, args.run)
    # One consume thread: c.resume below checks the offsets this group commits, and the
    # C++ client (1.2.x ConsumeMessageConcurrentlyService::ConsumeRequest) computes a
    # batch's offset (removeMessage) and stores it (updateConsumeOffset, not increase-only)
    # as two steps. Two threads finishing batches of one queue at once can store the older
    # offset last, and the client then commits it at shutdown: a redelivery the broker
    # cannot prevent. One thread runs the batches one after the other.
    col = consume(args, dl, topic, group, "TagA || TagB", want, threads=1)
    col.check_all_arrived("c.consume: all %d TagA/TagB messages received by `TagA || TagB`" % len(want))
    tag_c = [r["key"] for r in col.seen if r["tags"] == "TagC"]
    check("c.consume: no TagC message delivered", not tag_c, "%d TagC: %s" % (len(tag_c), sample(tag_c)))
    bad = []
    for r in col.seen:
        exp = sent.get(r["key"])
        if exp is None:
            if r["tags"] != "TagC":
                bad.append("unknown key %r" % r["key"])
            continue
        tag, body, prop = exp
        if r["tags"] != tag:
            bad.append("%s: tag %r != %r" % (r["key"], r["tags"], tag))
        if r["body"] != body:
            bad.append("%s: body %r != %r" % (r["key"], (r["body"] or b"")[:40], body[:40]))
        if r["prop"] != prop:
            bad.append("%s: property %s=%r != %r" % (r["key"], PROP, r["prop"], prop))
        if r["topic"] != topic:
            bad.append("%s: topic %r" % (r["key"], r["topic"]))
    check("c.consume: bodies (incl. compressed), tags, keys and user property intact",
          not bad and not col.errors and col.seen, "%s %s" % (sample(bad, 3), col.errors[:2]))
    dups = col.duplicates()
    if dups:
        progress("note: %d duplicate deliveries (allowed: at-least-once)" % dups)

    # c'. The same group, restarted, resumes from its committed offsets: it gets the
    # messages sent since, and none of those it consumed before its clean shutdown.
    if not col.seen or dl.left() < 40:
        return
    fresh = {}
    for j in range(args.resume_count):
        key = "%s-r%d" % (topic, j)
        try:
            r = producer.send_sync(make_msg(topic, key, TAGS[j % 2], "resume %d" % j, {PROP: "r-%d" % j}))
            if int(r.status) == 0:
                fresh[key] = j
        except Exception as e:  # noqa: BLE001
            progress("resume send %d failed: %s" % (j, e))
    col2 = consume(args, dl, topic, group, "TagA || TagB", fresh, instance=group + "-again")
    col2.check_all_arrived("c.resume: restarted group %s gets the %d messages sent since" % (group, len(fresh)),
                           also=fresh)
    again = sorted({r["key"] for r in col2.seen if r["key"] in want}, key=_natural)
    check("c.resume: restarted group gets none it had consumed (offsets committed)", not again,
          "%d redelivered: %s" % (len(again), sample(again)))


def scenario_oneway(args, dl, producer):
    topic = scenario_topic(args, dl, "oneway", "d.oneway")
    n = args.oneway_count
    keys = []
    errors = []
    for i in range(n):
        key = "%s-k%d" % (topic, i)
        try:
            producer.send_oneway(make_msg(topic, key, "TagO", "oneway %d" % i, {PROP: "o-%d" % i}))
            keys.append(key)
        except Exception as e:  # noqa: BLE001
            errors.append("#%d: %s" % (i, e))
            if len(errors) >= 5:
                break
    check("d.oneway: %d oneway sends accepted by the client" % n, not errors, sample(errors, 3))
    routed(args, dl, topic, "d.oneway: %s has a route after oneway sends")
    col = consume(args, dl, topic, "%s_%s_oneway" % (args.prefix, args.run), "*", keys)
    col.check_all_arrived("d.oneway: all %d oneway messages landed and were consumed" % len(keys), also=keys)
    bad = [r["key"] for r in col.seen
           if r["key"] in col.expected and r["body"] != ("oneway %s" % r["key"].rsplit("-k", 1)[1]).encode()]
    check("d.oneway: bodies intact", not bad, sample(bad))


def scenario_orderly(args, dl, producer):
    topic = scenario_topic(args, dl, "orderly", "e.orderly")
    n, shards = args.orderly_count, args.shards
    keys, failures = [], []
    for i in range(n):
        if dl.left() < 30:
            failures.append("stopped at #%d: global deadline near" % i)
            break
        shard = i % shards
        key = "%s-k%d" % (topic, i)
        try:
            r = producer.send_orderly(
                make_msg(topic, key, "TagS%d" % shard, "orderly shard=%d seq=%d" % (shard, i),
                         {"seq": str(i), "shard": str(shard)}), shard)
        except Exception as e:  # noqa: BLE001
            failures.append("#%d: %s" % (i, e))
            if len(failures) >= 5:
                break
            continue
        if int(r.status) != 0 or not r.msg_id:
            failures.append("#%d: status=%s msg_id=%r" % (i, r.status, r.msg_id))
            continue
        keys.append(key)
    check("e.orderly: %d send_orderly (%d shards) return SEND_OK" % (n, shards), len(keys) == n and not failures,
          "%d ok; %s" % (len(keys), sample(failures, 3)))
    routed(args, dl, topic, "e.orderly: %s has a route")
    col = consume(args, dl, topic, "%s_%s_orderly" % (args.prefix, args.run), "*", keys, orderly=True)
    col.check_all_arrived("e.orderly: all %d orderly messages consumed" % len(keys), also=keys)
    per_queue = {}
    shard_queues = {}
    bad_fields = []
    with col.lock:
        seen = list(col.seen)
    for r in seen:
        try:
            seq, shard = int(r["seq"]), int(r["shard"])
        except (TypeError, ValueError):
            bad_fields.append(r["key"])
            continue
        if r["body"] != ("orderly shard=%d seq=%d" % (shard, seq)).encode():
            bad_fields.append(r["key"])
        per_queue.setdefault(r["queue_id"], []).append(seq)
        shard_queues.setdefault(shard, set()).add(r["queue_id"])
    disorder = []
    for q, seqs in sorted(per_queue.items()):
        for a, b in zip(seqs, seqs[1:]):
            if b <= a:
                disorder.append("queue %d: %d after %d" % (q, b, a))
                break
    check("e.orderly: each queue delivered in send order (increasing seq per queue)",
          seen and not disorder, "%s; per-queue counts %s" % (sample(disorder, 4),
                                                              {q: len(s) for q, s in per_queue.items()}))
    split = {s: sorted(qs) for s, qs in shard_queues.items() if len(qs) > 1}
    check("e.orderly: every shard arg maps to a single queue", seen and not split, "shards on several queues: %s" % split)
    check("e.orderly: seq/shard properties and bodies intact", not bad_fields, sample(bad_fields))
    progress("orderly: queues used %s" % sorted(per_queue))


def scenario_batch(args, dl, producer):
    topic = scenario_topic(args, dl, "batch", "f.batch")
    batches, size = args.batches, args.batch_size
    keys, failures = [], []
    for b in range(batches):
        msgs, bkeys = [], []
        for j in range(size):
            i = b * size + j
            key = "%s-k%d" % (topic, i)
            msgs.append(make_msg(topic, key, "TagB", "batch %d" % i, {PROP: "b-%d" % i}))
            bkeys.append(key)
        try:
            r = producer.send_batch(msgs)
        except Exception as e:  # noqa: BLE001
            failures.append("batch %d: %s" % (b, e))
            if len(failures) >= 3:
                break
            continue
        # rocketmq-client-cpp 1.2.x reports the batch's own UNIQ_KEY as its msg id, which a
        # batch does not have: an empty msg id is the client's doing, not the broker's.
        if int(r.status) != 0:
            failures.append("batch %d: status=%s msg_id=%r" % (b, r.status, r.msg_id))
            continue
        keys.extend(bkeys)
    check("f.batch: %d send_batch of %d return SEND_OK" % (batches, size), not failures, sample(failures, 3))
    routed(args, dl, topic, "f.batch: %s has a route")
    col = consume(args, dl, topic, "%s_%s_batch" % (args.prefix, args.run), "*", keys)
    col.check_all_arrived("f.batch: all %d batched messages consumed" % len(keys), also=keys)
    bad = [r["key"] for r in col.seen if r["key"] in col.expected and
           (r["body"] != ("batch %s" % r["key"].rsplit("-k", 1)[1]).encode()
            or r["prop"] != "b-%s" % r["key"].rsplit("-k", 1)[1] or r["tags"] != "TagB")]
    check("f.batch: bodies, tags and properties intact", not bad, sample(bad))


def parse_delay_levels(text):
    """messageDelayLevel ("1s 5s 10s 30s 1m ...") as seconds per level."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return [int(w[:-1]) * units[w[-1]] for w in text.split()]


class RetryOnce(Collector):
    """Records every delivery; the callback raises (RECONSUME_LATER) on the first delivery
    of the keys in `fail_first`."""

    def __init__(self, expected_keys, fail_first):
        Collector.__init__(self, expected_keys)
        self.fail_first = set(fail_first)
        self.retried = threading.Event()

    def __call__(self, msg):
        Collector.__call__(self, msg)
        key = decode(msg.keys)
        with self.lock:
            recs = self.by_key.get(key) or [{}]
            rec = recs[-1]
            if key in self.fail_first and len(recs) >= 2:
                self.retried.set()
        if key in self.fail_first and rec.get("reconsume_times") == 0:
            raise RuntimeError("reconsume %s later (on purpose)" % key)


def scenario_delay(args, dl, producer):
    topic = args.prefix + "-delay"
    levels = parse_delay_levels(args.delay_levels)
    level = min(2, len(levels))
    retry_level = min(3, len(levels))
    early = 0.05  # store times are whole ms: allow rounding, nothing more
    sent = {}  # key -> (send time, msg id)
    failures = []
    for i in range(args.delay_count):
        key = "%s-k%d" % (topic, i)
        m = make_msg(topic, key, "TagD", "delay %d" % i, {PROP: "d-%d" % i})
        m.set_delay_time_level(level)
        t = time.time()
        r = sync_sent(producer, m, key, failures)
        if r is not None:
            sent[key] = (t, r.msg_id)
    check("g.delay: %d sends at delay level %d (%ds) return SEND_OK" % (args.delay_count, level, levels[level - 1]),
          len(sent) == args.delay_count and not failures, sample(failures, 3))
    routed(args, dl, topic, "g.delay: %s has a route")
    retry_key = "%s-k0" % topic
    col = RetryOnce(sent.keys(), [retry_key])
    group = "%s_%s_delay" % (args.prefix, args.run)
    consumer = push_consumer(args, topic, group, col)
    want = levels[level - 1] + levels[retry_level - 1] + 30
    wait = dl.budget(want)
    progress("consumer %s on %s: waiting up to %.0fs for %d delayed messages and one retry"
             % (group, topic, wait, len(sent)))
    progress("the callback raises once for %s on purpose (RECONSUME_LATER); the binding prints "
             "that exception as 'Exception ignored on calling ctypes callback function'" % retry_key)
    if not start_consumer(consumer, min(30, max(wait, 1)), "g.delay", group):
        return
    end = time.monotonic() + wait
    col.all_arrived.wait(max(0, end - time.monotonic()))
    col.retried.wait(max(0, end - time.monotonic()))
    time.sleep(min(args.grace, max(0, dl.left() - 10)))
    stop_consumer(consumer, topic, group)

    col.check_all_arrived("g.delay: all %d delayed messages consumed" % len(sent), also=sent)
    with col.lock:
        firsts = {k: v[0] for k, v in col.by_key.items() if k in sent}
        by_key = {k: list(v) for k, v in col.by_key.items()}
    early_ones = ["%s after %.2fs" % (k, r["at"] - sent[k][0]) for k, r in firsts.items()
                  if r["at"] < sent[k][0] + levels[level - 1] - early]
    check("g.delay: none delivered before its %ds delay" % levels[level - 1], firsts and not early_ones,
          sample(early_ones))
    bad = [k for k, r in firsts.items()
           if r["body"] != ("delay %s" % k.rsplit("-k", 1)[1]).encode() or r["tags"] != "TagD"
           or r["prop"] != "d-%s" % k.rsplit("-k", 1)[1] or r["topic"] != topic or r["msg_id"] != sent[k][1]]
    check("g.delay: bodies, tags, property, topic and msg id intact", firsts and not bad, sample(bad))
    dups = {k: len(v) for k, v in by_key.items() if k != retry_key and len(v) > 1}
    check("g.delay: each delivered once (but the retried one)", not dups, str(dups))
    retry = by_key.get(retry_key, [])
    check("h.retry: the failed message came back once, with reconsume_times 1",
          [r["reconsume_times"] for r in retry] == [0, 1],
          "deliveries' reconsume_times: %s" % [r["reconsume_times"] for r in retry])
    if len(retry) >= 2:
        gap = retry[1]["at"] - retry[0]["at"]
        check("h.retry: it came back after the retry level's delay (%ds)" % levels[retry_level - 1],
              gap >= levels[retry_level - 1] - early, "after %.2fs" % gap)
        check("h.retry: body and property intact, original topic", retry[1]["body"] == retry[0]["body"]
              and retry[1]["prop"] == retry[0]["prop"] and retry[1]["topic"] == topic,
              "%r" % {k: retry[1][k] for k in ("body", "prop", "topic")})


def scenario_timer(args, dl, producer):
    """RocketMQ 5 timer messages set through the C++ client's user properties
    (`set_property`, which does not filter system keys): TIMER_DELAY_SEC, TIMER_DELAY_MS
    and an absolute TIMER_DELIVER_MS. The C++ push consumer must get each one no earlier
    than due (by its own clock and by the copy's store time), intact, with the send's id."""
    topic = args.prefix + "-timer"
    early = 0.05  # store times are whole ms: allow rounding, nothing more
    n = args.timer_count
    sent = {}  # key -> (due, msg id, body)
    failures = []
    for i in range(n):
        key = "%s-k%d" % (topic, i)
        body = "timer %d" % i
        t = time.time()
        kind = i % 3
        if kind == 0:
            props, due = {"TIMER_DELAY_SEC": "3"}, t + 3.0
        elif kind == 1:
            props, due = {"TIMER_DELAY_MS": "1500"}, t + 1.5
        else:
            at_ms = int(t * 1000) + 5000
            props, due = {"TIMER_DELIVER_MS": str(at_ms)}, at_ms / 1000.0
        props[PROP] = "t-%d" % i
        r = sync_sent(producer, make_msg(topic, key, "TagT", body, props), key, failures)
        if r is not None:
            sent[key] = (due, r.msg_id, body)
    check("j.timer: %d timer sends (TIMER_DELAY_SEC / TIMER_DELAY_MS / TIMER_DELIVER_MS) return SEND_OK" % n,
          len(sent) == n and not failures, sample(failures, 3))
    routed(args, dl, topic, "j.timer: %s has a route")
    col = Collector(sent.keys())
    group = "%s_%s_timer" % (args.prefix, args.run)
    consumer = push_consumer(args, topic, group, col)
    wait = dl.budget(40)
    progress("consumer %s on %s: waiting up to %.0fs for %d timer messages" % (group, topic, wait, len(sent)))
    if not start_consumer(consumer, min(30, max(wait, 1)), "j.timer", group):
        return
    col.all_arrived.wait(wait)
    time.sleep(min(args.grace, max(0, dl.left() - 10)))
    stop_consumer(consumer, topic, group)
    col.check_all_arrived("j.timer: all %d timer messages consumed" % len(sent), also=sent)
    with col.lock:
        firsts = {k: v[0] for k, v in col.by_key.items() if k in sent}
        dups = {k: len(v) for k, v in col.by_key.items() if len(v) > 1}
    early_ones = ["%s %.3fs early (store %.3fs early)" % (k, sent[k][0] - r["at"], sent[k][0] - r["store_ms"] / 1000.0)
                  for k, r in firsts.items()
                  if r["at"] < sent[k][0] - early or r["store_ms"] / 1000.0 < sent[k][0] - early]
    check("j.timer: none received or stored before due", firsts and not early_ones, sample(early_ones))
    late = sorted(r["at"] - sent[k][0] for k, r in firsts.items())
    if late:
        progress("j.timer: lateness at the C++ consumer p50 %.3fs, max %.3fs" % (late[len(late) // 2], late[-1]))
    bad = [k for k, r in firsts.items()
           if r["body"] != sent[k][2].encode() or r["tags"] != "TagT" or r["topic"] != topic
           or r["msg_id"] != sent[k][1] or r["prop"] != "t-%s" % k.rsplit("-k", 1)[1]]
    check("j.timer: bodies, tags, property, topic and msg id intact", firsts and not bad, sample(bad))
    marks = [k for k, r in firsts.items()
             if not r["TIMER_OUT_MS"] or not r["TIMER_ENQUEUE_MS"] or not r["TIMER_DEQUEUE_MS"] or r["REAL_TOPIC"]]
    check("j.timer: copies carry TIMER_OUT_MS / TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS and no REAL_TOPIC",
          firsts and not marks, sample(marks))
    check("j.timer: each delivered once", not dups, str(dups))


INVOKE_BROKER_TO_RESET_OFFSET = 222
GET_CONSUME_STATS = 208


def scenario_reset(args, dl, producer):
    """A running C++ push consumer's group is reset to a time (INVOKE_BROKER_TO_RESET_OFFSET,
    as mqadmin resetOffsetByTime sends it): the consumer must consume again exactly what
    was stored from that time on, and the group's committed offsets (GET_CONSUME_STATS,
    what consumerProgress shows) must come back to the end of every queue."""
    topic = args.prefix + "-reset"
    n = 20
    keys = {"old": [], "new": []}
    for batch in ("old", "new"):
        if batch == "new":
            time.sleep(0.5)
            mark_ms = int(time.time() * 1000)
            time.sleep(0.5)
        for i in range(n):
            key = "%s-%s%d" % (topic, batch, i)
            r = producer.send_sync(make_msg(topic, key, "TagZ", "reset %s" % key, {}))
            if int(r.status) == 0:
                keys[batch].append(key)
    check("k.reset: %d sends return SEND_OK" % (2 * n), len(keys["old"]) + len(keys["new"]) == 2 * n)
    route = routed(args, dl, topic, "k.reset: %s has a route")
    col = Collector(keys["old"] + keys["new"])
    group = "%s_%s_reset" % (args.prefix, args.run)
    consumer = push_consumer(args, topic, group, col)
    if not start_consumer(consumer, 30, "k.reset", group):
        return
    col.all_arrived.wait(dl.budget(40))
    check("k.reset: first pass consumed all %d" % (2 * n), not col.missing(), sample(col.missing()))
    masters = [(b.get("brokerAddrs") or {}).get("0") for b in (route or {}).get("brokerDatas") or []]
    answers = []
    for addr in filter(None, masters):
        code, remark, _, body = remoting_call(addr, INVOKE_BROKER_TO_RESET_OFFSET, {
            "topic": topic, "group": group, "timestamp": mark_ms, "isForce": "true"})
        answers.append((addr, code, remark))
    check("k.reset: INVOKE_BROKER_TO_RESET_OFFSET answered SUCCESS", answers and all(a[1] == 0 for a in answers),
          str(answers))

    def twice():
        with col.lock:
            return all(len(col.by_key.get(k, [])) >= 2 for k in keys["new"])
    deadline = time.monotonic() + dl.budget(30)
    while not twice() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(min(args.grace, max(0, dl.left() - 10)))
    with col.lock:
        again_new = [k for k in keys["new"] if len(col.by_key.get(k, [])) < 2]
        again_old = [k for k in keys["old"] if len(col.by_key.get(k, [])) > 1]
    check("k.reset: every message stored after the time consumed again", not again_new, sample(again_new))
    check("k.reset: nothing stored before the time consumed again", not again_old, sample(again_old))

    def behind():
        total = 0
        for addr in filter(None, masters):
            code, _, _, body = remoting_call(addr, GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
            if code != 0:
                return None
            text = body.decode("utf-8", "replace")
            # offsetTable maps queue objects (fastjson's bare object keys, not JSON) to
            # {brokerOffset, consumerOffset, ...}: read each value object on its own.
            for m in re.finditer(r'\{[^{}]*"brokerOffset"[^{}]*\}', text):
                o = json.loads(m.group(0))
                total += o["brokerOffset"] - o["consumerOffset"]
        return total
    deadline = time.monotonic() + dl.budget(20)
    left = behind()
    while left != 0 and time.monotonic() < deadline:
        time.sleep(0.5)
        left = behind()
    check("k.reset: the group's committed offsets reach the end of every queue again", left == 0,
          "still %s behind" % left)
    stop_consumer(consumer, topic, group)


GET_MAX_OFFSET = 30


def stored_count(route, topic):
    """Messages the topic's queues hold, summed over GET_MAX_OFFSET at each master."""
    total = 0
    for b in route.get("brokerDatas") or []:
        addr = (b.get("brokerAddrs") or {}).get("0")
        for q in route.get("queueDatas") or []:
            if not addr or q.get("brokerName") != b.get("brokerName"):
                continue
            for qid in range(q.get("writeQueueNums", 0)):
                code, remark, ext, _ = remoting_call(addr, GET_MAX_OFFSET, {"topic": topic, "queueId": qid})
                if code != 0:
                    raise RemotingError("GET_MAX_OFFSET %s/%d: %s %s" % (topic, qid, code, remark))
                total += int(ext.get("offset", "0"))
    return total


SEND_MESSAGE = 10


def resend_raw(route, topic, uniq, key, body):
    """Sends a message again as a retrying producer would: SEND_MESSAGE with the UNIQ_KEY
    the first send carried. Returns (code, remark, extFields)."""
    b = (route.get("brokerDatas") or [{}])[0]
    addr = (b.get("brokerAddrs") or {}).get("0")
    props = "UNIQ_KEY\x01%s\x02KEYS\x01%s\x02TAGS\x01TagD\x02" % (uniq, key)
    ext = {
        "producerGroup": "TernDedupRaw", "topic": topic, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0,
        "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": props,
        "reconsumeTimes": 0, "unitMode": "false", "batch": "false",
    }
    code, remark, ext, _ = remoting_call(addr, SEND_MESSAGE, ext, body.encode())
    return code, remark, ext


def scenario_dedup(args, dl, producer):
    """Against a broker with duplicateCheckWindowSeconds on. rocketmq-client-cpp 1.2.x
    replaces a UNIQ_KEY property with its own id on every send, so it cannot resend a
    message itself; each message it sent is sent again with the id it chose (as a Java
    producer retrying after a lost answer does): answered SEND_OK with the first copy's
    queue offset, stored once, and the C++ push consumer gets it once."""
    topic = args.prefix + "-dedup"
    n = 20
    first = {}
    problems = []
    for i in range(n):
        key = "%s-k%d" % (topic, i)
        try:
            r = producer.send_sync(make_msg(topic, key, "TagD", "dedup %d attempt 0" % i, {}))
        except Exception as e:  # noqa: BLE001
            problems.append("#%d: %s" % (i, e))
            continue
        if int(r.status) != 0 or not r.msg_id:
            problems.append("#%d: status=%s msg_id=%r" % (i, r.status, r.msg_id))
            continue
        first[key] = (r.msg_id, r.offset)
    check("i.dedup: %d C++ sends SEND_OK" % n, not problems and len(first) == n, sample(problems, 3))
    route = routed(args, dl, topic, "i.dedup: %s has a route")
    if not route_ok(route):
        return
    for i, (key, (uniq, offset)) in enumerate(sorted(first.items(), key=lambda kv: _natural(kv[0]))):
        try:
            code, remark, ext = resend_raw(route, topic, uniq, key, "dedup %d attempt 1" % i)
        except (OSError, RemotingError) as e:
            problems.append("%s: %s" % (key, e))
            continue
        if code != 0 or int(ext.get("queueOffset", "-1")) != offset:
            problems.append("%s: resend answered code %s (%s) queueOffset %s, first %s"
                            % (key, code, remark, ext.get("queueOffset"), offset))
    check("i.dedup: each sent again with its UNIQ_KEY is answered SEND_OK with the first queue offset",
          not problems, sample(problems, 3))
    try:
        stored = stored_count(route, topic)
    except (OSError, RemotingError) as e:
        check("i.dedup: stored count readable", False, str(e))
        return
    check("i.dedup: the broker stored %d messages, one per UNIQ_KEY" % n, stored == n, "stored %d" % stored)
    col = consume(args, dl, topic, "%s_%s_dedup" % (args.prefix, args.run), "*", list(first))
    bodies_ok = all(r["body"] == ("dedup %s attempt 0" % r["key"].rsplit("-k", 1)[1]).encode()
                    for r in col.seen if r["key"] in col.expected)
    col.check_all_arrived("i.dedup: the C++ consumer gets every message, the first attempt's body",
                          also=bodies_ok)


SCENARIOS = {
    "sync": scenario_sync,
    "oneway": scenario_oneway,
    "orderly": scenario_orderly,
    "batch": scenario_batch,
    "delay": scenario_delay,
    "dedup": scenario_dedup,
    "timer": scenario_timer,
    "reset": scenario_reset,
}


# ---------------------------------------------------------------------------------------
# Helper modes for the restart tests
# ---------------------------------------------------------------------------------------

def restart_body(key, i=None, big=0):
    """The send-only body of message #i; with --big N, every tenth (i % 10 == 3) gets N more
    bytes, over the C++ client's 4 KiB compression threshold (grpc_interop.py's cross
    scenario rebuilds the same bodies)."""
    return "restart %s" % key + ("x" * big if big and i is not None and i % 10 == 3 else "")


def send_only(args, dl):
    topic = args.topic
    producer = make_producer(args, "%s_%s_pg" % (args.prefix, args.run))
    acked, failures = 0, []
    for i in range(args.count):
        if dl.left() < 5:
            failures.append("global deadline near at #%d" % i)
            break
        key = "%s-k%d" % (topic, i)
        try:
            r = producer.send_sync(make_msg(topic, key, "TagR", restart_body(key, i, args.big), {"seq": str(i)}))
        except Exception as e:  # noqa: BLE001
            failures.append("#%d: %s" % (i, e))
            if args.keep_going:
                # Through a failover: the next key after a pause, as an application would.
                print("FAILED %s" % key, flush=True)
                time.sleep(0.05)
                continue
            progress("send #%d failed: %s" % (i, e))
            if args.stop_on_error or len(failures) >= 5:
                break
            continue
        if int(r.status) == 0 and r.msg_id:
            acked += 1
            print("ACK %s %s %d" % (key, r.msg_id, r.offset), flush=True)
        else:
            failures.append("#%d: status=%s" % (i, r.status))
    progress("send-only: %d of %d acknowledged" % (acked, args.count))
    check("send-only: %d sync sends to %s acknowledged" % (args.count, topic), acked == args.count and not failures,
          "%d acked; %s" % (acked, sample(failures, 3)))
    stop(producer, "producer shutdown")


def consume_only(args, dl):
    topic = args.topic
    with open(args.expect_keys) as f:
        keys = [line.strip() for line in f if line.strip()]
    # Reading needs no master: after a master dies its slave serves the queues.
    route = routed(args, dl, topic, "consume-only: %s has a readable route", 20, readable_only=True)
    progress("route %s: %s" % (topic, route_summary(route)))
    group = args.group or "%s_%s_restart" % (args.prefix, args.run)
    col = consume(args, dl, topic, group, "*", keys)
    col.check_all_arrived("consume-only: all %d acknowledged messages of %s consumed" % (len(keys), topic), shown=10)
    bad = [r["key"] for r in col.seen if r["key"] in col.expected and r["body"] != restart_body(r["key"]).encode()]
    check("consume-only: bodies intact", not bad, sample(bad))
    print("CONSUMED %d distinct, %d deliveries" % (len(col.by_key), len(col.seen)), flush=True)


def dump_only(args, dl):
    """Push-consumes --topic (new group) until every key of --expect-keys arrived and prints
    each message as `GOT <json>`: key, tags, body (utf-8), the `interop` property, UNIQ_KEY
    and msg id (for grpc_interop.py's cross scenario: what the C++ client makes of a 5.x
    message)."""
    with open(args.expect_keys) as f:
        keys = [line.strip() for line in f if line.strip()]
    routed(args, dl, args.topic, "dump-only: %s has a readable route", 20, readable_only=True)
    col = consume(args, dl, args.topic, args.group or "%s_%s_dump" % (args.prefix, args.run), "*", keys)
    col.check_all_arrived("dump-only: all %d keys of %s consumed" % (len(keys), args.topic), shown=10)
    for r in col.seen:
        print("GOT " + json.dumps({"key": r["key"], "tags": r["tags"], "body": decode(r["body"]),
                                   "prop": r["prop"], "uniq": r["UNIQ_KEY"], "msg_id": r["msg_id"],
                                   "reconsume_times": r["reconsume_times"]}), flush=True)


# ---------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", required=True,
                    help="name server address(es): host:port, several separated by ';' or ','")
    ap.add_argument("--prefix", default=None, help="topic/group prefix (default: TernIT<random>)")
    ap.add_argument("--precreated", action="store_true",
                    help="the scenario topics were created beforehand (UPDATE_AND_CREATE_TOPIC)")
    ap.add_argument("--expect-queues", type=int, default=0,
                    help="with --precreated: the number of read queues the sync topic must have")
    ap.add_argument("--scenarios", default="sync,oneway,orderly,batch,delay,timer",
                    help="comma-separated subset of: %s" % ",".join(SCENARIOS))
    ap.add_argument("--count", type=int, default=None, help="sync sends (default 1000; send-only: 200)")
    ap.add_argument("--resume-count", type=int, default=30,
                    help="messages sent before the tag consumer's group is restarted")
    ap.add_argument("--oneway-count", type=int, default=100)
    ap.add_argument("--orderly-count", type=int, default=400)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--delay-count", type=int, default=10)
    ap.add_argument("--timer-count", type=int, default=30)
    ap.add_argument("--delay-levels", default="1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
                    help="the broker's messageDelayLevel (the delay scenario's expected delays)")
    ap.add_argument("--consume-timeout", type=float, default=60.0,
                    help="seconds a consumer waits for all its messages")
    ap.add_argument("--grace", type=float, default=1.0,
                    help="seconds a consumer keeps running after all expected arrived")
    ap.add_argument("--send-timeout-ms", type=int, default=5000)
    ap.add_argument("--deadline", type=float, default=170.0,
                    help="global deadline in seconds; past it, report and exit 1")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--send-only", action="store_true", help="restart helper: send --count to --topic")
    mode.add_argument("--consume-only", action="store_true",
                      help="restart helper: consume --topic until all keys of --expect-keys arrived")
    mode.add_argument("--dump-only", action="store_true",
                      help="like --consume-only, printing each message as a `GOT <json>` line")
    ap.add_argument("--topic", help="topic for --send-only/--consume-only")
    ap.add_argument("--group", help="consumer group for --consume-only (default: new, unique)")
    ap.add_argument("--expect-keys", help="file of keys, one a line, for --consume-only")
    ap.add_argument("--stop-on-error", action="store_true", help="--send-only: stop at the first failed send")
    ap.add_argument("--keep-going", action="store_true",
                    help="--send-only: after a failed send, pause 50 ms and send the next key (through a failover)")
    ap.add_argument("--big", type=int, default=0,
                    help="--send-only: every tenth body (i %% 10 == 3) gets this many more bytes")
    ap.add_argument("--access-key", help="ACL account: producers and consumers sign their requests")
    ap.add_argument("--secret-key", help="the account's secret (with --access-key)")
    args = ap.parse_args(argv)

    args.ns_list = [a.strip() for a in re.split(r"[;,]", args.namesrv) if a.strip()]
    if not args.ns_list or any(":" not in a for a in args.ns_list):
        ap.error("--namesrv wants host:port[;host:port...]")
    args.namesrv = ";".join(args.ns_list)  # the C++ client's separator
    if args.count is None:
        args.count = 200 if args.send_only else 1000
    if args.count < 1:
        ap.error("--count must be at least 1")
    args.scenario_list = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    settle_args(ap, args, "TernIT", 100, SCENARIOS)
    if (args.send_only or args.consume_only or args.dump_only) and not args.topic:
        ap.error("--send-only/--consume-only/--dump-only need --topic")
    if (args.consume_only or args.dump_only) and not args.expect_keys:
        ap.error("--consume-only/--dump-only need --expect-keys FILE")
    return args


def run(args, dl):
    """The run proper (run_main parsed the arguments before and prints the summary after)."""
    progress("C++ client logs go to %s/logs/rocketmq-cpp" % os.environ.get("HOME", "?"))
    progress("name server(s) %s, prefix %s, run %s" % (args.namesrv, args.prefix, args.run))

    # Probe the name server before the C++ client could block on it.
    probe_topic = "TBW102"
    try:
        tbw = get_route(args.ns_list, probe_topic)
    except RemotingError as e:
        check("name server answers GET_ROUTEINFO_BY_TOPIC", False, str(e))
        return
    check("name server answers GET_ROUTEINFO_BY_TOPIC", True)
    if not args.precreated and not args.consume_only and not args.dump_only:
        check("name server has a TBW102 route (needed for auto-creation)", route_ok(tbw), route_summary(tbw))

    if not client_loads(rmq, "C++ client"):
        return

    try:
        if args.send_only:
            send_only(args, dl)
        elif args.consume_only:
            consume_only(args, dl)
        elif args.dump_only:
            dump_only(args, dl)
        else:
            producer = make_producer(args, "%s_%s_pg" % (args.prefix, args.run))
            check("producer starts", True)
            for name in args.scenario_list:
                if dl.left() < 20:
                    check("%s: scenario ran" % name, False, "skipped: global deadline near")
                    continue
                progress("--- scenario %s (topic %s-%s)" % (name, args.prefix, name))
                try:
                    SCENARIOS[name](args, dl, producer)
                except Exception as e:  # noqa: BLE001
                    import traceback
                    traceback.print_exc()
                    check("%s: scenario ran to the end" % name, False, repr(e))
            if not stop(producer, "producer shutdown"):
                check("producer shuts down", False, "shutdown hung or failed")
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        check("harness", False, repr(e))


if __name__ == "__main__":
    run_main(parse_args, run, sys.argv[1:])
