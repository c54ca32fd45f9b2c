#!/usr/bin/env python3
"""Interop scenarios for Tern's gRPC endpoint, driven by the REAL RocketMQ 5.x client.

The client is PyPI `rocketmq-python-client==5.1.2` (pure Python, grpcio), Apache's 5.x client
speaking apache.rocketmq.v2 MessagingService. Create its venv with
`bash scripts/setup-python-grpc.sh` (it cannot share `.venv`: the C++ client's package is also
named `rocketmq`) and run with HOME pointing at a scratch folder (the client logs to
$HOME/logs/rocketmq_python):

    .venv-grpc/bin/python tests/interop/grpc_interop.py --endpoint 127.0.0.1:8081 \\
        --namesrv 127.0.0.1:9876 --admin target/release/tern-admin --scenario normal,fifo

5.x clients never auto-create topics, so before each scenario the script creates its topics
(with their `message.type`) and consumer groups with `tern-admin updateTopic` /
`updateSubGroup` against --namesrv. Each scenario uses topics and groups PREFIX-<scenario>...:

    normal          a Producer sends 200 messages (tags TagA/TagB, keys, user properties, one
                    body over 4 KiB); a SimpleConsumer receives every one intact with the
                    send receipt's message id and delivery_attempt 1, acks, and nothing comes
                    again; a second group filtering on TagA gets exactly the TagA ones.
    fifo            FIFO topic, orderly group: message groups A, B, C x 30 interleaved, with
                    sequence numbers; a PushConsumer (fifo per the server's settings) sees each
                    group in order, once; a message_group send to a NORMAL topic is refused by
                    the client.
    delay           DELAY topic, delivery_timestamp now + 4 s: each message is received no
                    earlier than due - 1 s (the wire carries whole seconds), once.
    transaction     TRANSACTION topic: commit -> delivered once; rollback -> never; left
                    unresolved -> the broker's check-back reaches the Producer's checker over
                    Telemetry, which answers COMMIT -> delivered once. The broker needs short
                    transactionCheckInterval / transactionTimeOut (the driver's broker.conf).
    simple          receive + ack: never again; not acked: the same message id comes back after
                    the invisible duration with delivery_attempt 2; change_invisible_duration
                    (2 s) brings one back sooner; an ack with a garbage receipt handle raises
                    BadRequestException.
    push_retry_dlq  a PushConsumer whose listener fails one message X: X comes again with
                    delivery_attempt 1, 2, 3 (the group's retryMaxTimes is set to 2), then lands
                    in %DLQ%<group> (tern-admin queryMsgByUniqueKey / topicStatus); the other
                    messages are consumed once, never retried.
    cross           5.x Producer -> Apache's 4.x C++ push consumer (tests/interop/cpp_interop.py
                    --dump-only, run with --cpp-python, the other venv): body, tag, keys, user
                    property and UNIQ_KEY == the 5.x message id; the C++ producer
                    (--send-only --big 5000) -> a 5.x SimpleConsumer: ids, bodies (a > 4 KiB
                    one, compressed by the C++ client, arrives inflated), tag, keys, property.
    errors          an unknown topic: a send fails, its QueryRoute raises NotFoundException;
                    tag "a|b" is refused by the client, and put on the wire anyway the broker
                    answers BadRequestException; a 64-byte message_group -> BadRequestException.
    restart         (needs a driver that restarts the broker on the SAME ports) sends 100,
                    receives 50 with invisible 20 s and acks 25 of them, prints
                    `RESTART-NOW`, waits for a line on stdin (the driver stops or kill -9s the
                    broker, starts it again and writes a line); then the same Producer sends
                    and the same SimpleConsumer receives again within --reconnect-wait s (they
                    reconnect by themselves; past that a new SimpleConsumer of the group
                    reads on, so what the broker kept is checked anyway): the other 50
                    arrive and the 25 unacked come back. After a SIGTERM (--restart-kind
                    term) they come back after their invisible time with delivery_attempt 2
                    and no acked one comes back; after kill -9 only what the broker
                    acknowledged to the producer must be there (acks and offsets of the last
                    seconds may be lost, so messages may come again).

Prints PASS/FAIL lines for named checks on stdout, progress on stderr, and ends with the
line `N passed, M failed`; exits 1 if anything failed. A global deadline (--deadline)
guarantees it never hangs: when it passes, the checks so far are reported with a failure.
"""

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

# Run as a file, this script's folder is first on sys.path already; put there again for a
# Python told to leave it out (-P, PYTHONSAFEPATH), as the shared harness lives beside it.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from interop_harness import (  # noqa: E402 - after the sys.path line above
    bounded, client_loads, progress, run_main, sample, settle_args,
)
from interop_harness import check as harness_check  # noqa: E402

PROP = "interop"  # the user property every scenario sets (cpp_interop.py's name too)


def check(name, ok, detail=""):
    """interop_harness.check with its detail on one line: tern-admin's output and the
    client's error texts can span lines, and a check is one line of the report."""
    return harness_check(name, ok, " ".join(str(detail).split()))


# ---------------------------------------------------------------------------------------
# tern-admin: topics and groups (5.x clients never auto-create), DLQ look-ups
# ---------------------------------------------------------------------------------------

def admin(args, *argv, ok_codes=(0,)):
    """Runs tern-admin against --namesrv; returns (returncode, stdout+stderr)."""
    cmd = [args.admin, argv[0], "-n", args.namesrv] + list(argv[1:])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return -1, "timed out: %s" % " ".join(cmd)
    out = (p.stdout or "") + (p.stderr or "")
    if p.returncode not in ok_codes:
        progress("tern-admin %s -> %d: %s" % (" ".join(argv), p.returncode, out.strip()[-400:]))
    return p.returncode, out


def create_topic(args, topic, kind, queues=8):
    rc, out = admin(args, "updateTopic", "-c", args.cluster, "-t", topic, "-r", str(queues),
                    "-w", str(queues), "-a", "+message.type=%s" % kind)
    check("setup: topic %s (%s) created with tern-admin" % (topic, kind), rc == 0, out.strip()[-300:])


def create_group(args, group, *flags):
    rc, out = admin(args, "updateSubGroup", "-c", args.cluster, "-g", group, *flags)
    check("setup: group %s%s created with tern-admin" % (group, (" (" + " ".join(flags) + ")") if flags else ""),
          rc == 0, out.strip()[-300:])


def stored_in(args, topic):
    """Messages the topic's queues hold (topicStatus: sum of max - min), or None."""
    rc, out = admin(args, "topicStatus", "-t", topic, "--json", ok_codes=(0, 1))
    if rc != 0:
        return None
    try:
        return sum(q["maxOffset"] - q["minOffset"] for q in json.loads(out[out.index("["):]))
    except (ValueError, KeyError, TypeError):
        return None


# ---------------------------------------------------------------------------------------
# The 5.x client
# ---------------------------------------------------------------------------------------

def rmq():
    import rocketmq  # imported late: argument errors show without the venv
    return rocketmq


def exc_types():
    from rocketmq.v5.exception import client_exception
    return client_exception


def config(args, access_key=None, secret_key=None):
    """The clients' configuration, signed as --access-key (or, given, another account)."""
    r = rmq()
    if access_key is None:
        access_key, secret_key = args.access_key or "", args.secret_key or ""
    return r.ClientConfiguration(args.endpoint, r.Credentials(access_key, secret_key),
                                 request_timeout=args.request_timeout)


def start(client, what):
    ok, err = bounded(client.startup, 30, "%s startup" % what)
    check("%s starts" % what, ok, "" if ok else err)
    return ok


def stop(client, what):
    ok, err = bounded(client.shutdown, 20, "%s shutdown" % what)
    if not ok:
        check("%s shuts down" % what, False, err)


def producer(args, topics, what, checker=None):
    p = rmq().Producer(config(args), tuple(topics), checker=checker)
    return p if start(p, what) else None


def simple_consumer(args, group, subs, what, await_duration=3):
    r = rmq()
    c = r.SimpleConsumer(config(args), group,
                         {t: r.FilterExpression(e) for t, e in subs.items()},
                         await_duration=await_duration)
    return c if start(c, what) else None


def message(topic, body, tag=None, keys=None, props=None, group=None, deliver_at=None):
    m = rmq().Message()
    m.topic = topic
    m.body = body if isinstance(body, bytes) else body.encode()
    if tag:
        m.tag = tag
    if keys:
        m.keys = keys
    for k, v in (props or {}).items():
        m.add_property(k, v)
    if group:
        m.message_group = group
    if deliver_at:
        m.delivery_timestamp = deliver_at  # seconds: the client puts whole seconds on the wire
    return m


def send(p, m, what):
    """Sends; the receipt, or None after a FAIL line."""
    ok, r = bounded(lambda: p.send(m), 30, what)
    if not ok:
        check(what, False, r)
        return None
    return r


def consumer_and_producer(args, name, topic, kind, queues=8, checker=None):
    """The start of scenario `name`, which sends to `topic` and receives with a SimpleConsumer:
    the topic (message.type `kind`) and the group `topic`-g made with tern-admin, the consumer
    (every tag) and a Producer started, then an empty receive that fixes the group's position
    before anything is sent. (consumer, producer), or (None, None) when either did not start."""
    group = topic + "-g"
    create_topic(args, topic, kind, queues=queues)
    create_group(args, group)
    c = simple_consumer(args, group, {topic: "*"}, "%s: SimpleConsumer" % name)
    p = producer(args, [topic], "%s: Producer" % name, checker=checker)
    if not (c and p):
        return None, None
    receive(c, None, 0.1)
    return c, p


def stop_both(name, c, p):
    """The end of scenario `name` begun with consumer_and_producer: both shut down."""
    stop(p, "%s: Producer" % name)
    stop(c, "%s: SimpleConsumer" % name)


def query_route(client, topic):
    """The QueryRoute request `client`'s route manager makes for `topic`, signed by the client
    and its answer judged by the client's own result checker, so a refusal raises the status's
    exception (the route manager itself turns it into a plain "failed to fetch topic route")."""
    from rocketmq.v5.util.messaging_result_checker import MessagingResultChecker
    req = client.route_manager._ClientRouteManager__topic_route_req(topic)
    res = client.rpc_client.query_topic_route_async(client.client_configuration.rpc_endpoints, req,
                                                    metadata=client.sign(),
                                                    timeout=client.client_configuration.request_timeout).result()
    MessagingResultChecker.check(res.status)
    return res


def record(m):
    """What a received message carries, as plain data."""
    return {
        "at": time.time(),
        "id": m.message_id,
        "topic": m.topic,
        "tag": m.tag,
        "keys": sorted(m.keys or ()),
        "props": dict(m.properties or {}),
        "body": m.body,
        "attempt": m.delivery_attempt,
        "group": m.message_group,
        "corrupted": m.corrupted,
    }


def receive(consumer, want, seconds, invisible=30, ack=True, stop_when=None, batch=32):
    """Receives until `want` distinct ids arrived (or stop_when(records) is true), the budget
    runs out or, with want=None, for the whole budget. Acks each message when `ack`.
    Returns (records in arrival order, errors, message objects by id)."""
    got, errors, objs = [], [], {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ok, msgs = bounded(lambda: consumer.receive(batch, invisible), 30, "receive")
        if not ok:
            errors.append(msgs)
            if len(errors) > 5:
                break
            time.sleep(0.5)
            continue
        for m in msgs or ():
            got.append(record(m))
            objs[m.message_id] = m
            if ack:
                aok, err = bounded(lambda: consumer.ack(m), 15, "ack")
                if not aok:
                    errors.append("ack %s: %s" % (m.message_id, err))
        if want is not None and len({g["id"] for g in got}) >= want:
            break
        if stop_when and stop_when(got):
            break
    return got, errors, objs


def duplicates(recs):
    seen, dup = set(), []
    for r in recs:
        if r["id"] in seen:
            dup.append(r["id"])
        seen.add(r["id"])
    return dup


class Listener:
    """PushConsumer listener: records every delivery; `fail(message) -> bool` picks the ones
    answered ConsumeResult.FAILURE."""

    def __init__(self, fail=None):
        self.lock = threading.Lock()
        self.seen = []
        self.fail = fail
        self.errors = []

    def consume(self, m):
        r = rmq()
        try:
            rec = record(m)
        except Exception as e:  # never ask for a retry because of our own bug
            with self.lock:
                self.errors.append(repr(e))
            return r.ConsumeResult.SUCCESS
        with self.lock:
            self.seen.append(rec)
        return r.ConsumeResult.FAILURE if self.fail and self.fail(rec) else r.ConsumeResult.SUCCESS

    def snapshot(self):
        with self.lock:
            return list(self.seen)

    def wait(self, pred, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if pred(self.snapshot()):
                return True
            time.sleep(0.2)
        return pred(self.snapshot())


def push_consumer(args, group, topic, listener, what):
    r = rmq()

    class L(r.MessageListener):
        def consume(self, m):
            return listener.consume(m)

    c = r.PushConsumer(config(args), group, L(), {topic: r.FilterExpression("*")})
    return c if start(c, what) else None


def body_of(i, big_every=None):
    b = "grpc %d \u00e9t\u00e9 " % i
    if big_every and i % big_every == 7:
        b += "x" * 5000  # over 4 KiB
    return b.encode()


def expect_intact(name, sent, got):
    """sent: {id: (body, tag, keys, props)}; got: records. Checks every field."""
    by_id = {}
    for g in got:
        by_id.setdefault(g["id"], g)
    missing = [i for i in sent if i not in by_id]
    check("%s: every sent message id received" % name, not missing,
          "missing %d of %d: %s" % (len(missing), len(sent), sample(missing)))
    stray = [i for i in by_id if i not in sent]
    check("%s: no message id that was not sent" % name, not stray, sample(stray))
    bad = []
    for i, (body, tag, keys, props) in sent.items():
        g = by_id.get(i)
        if g is None:
            continue
        if g["body"] != body:
            bad.append("%s body %r..(%d) != %r..(%d)" % (i, g["body"][:20], len(g["body"]), body[:20], len(body)))
        elif g["tag"] != tag:
            bad.append("%s tag %r != %r" % (i, g["tag"], tag))
        elif g["keys"] != sorted(keys):
            bad.append("%s keys %r != %r" % (i, g["keys"], keys))
        elif any(g["props"].get(k) != v for k, v in props.items()):
            bad.append("%s props %r lack %r" % (i, g["props"], props))
        elif g["corrupted"]:
            bad.append("%s: the client found its body digest wrong" % i)
    check("%s: bodies, tags, keys and properties intact (digest checked)" % name, not bad, sample(bad, 3))


# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------

def scenario_normal(args, dl):
    topic = args.prefix + "-normal"
    g_all, g_tag = topic + "-all", topic + "-tagA"
    create_topic(args, topic, "NORMAL")
    create_group(args, g_all)
    create_group(args, g_tag)
    c_all = simple_consumer(args, g_all, {topic: "*"}, "normal: SimpleConsumer (*)")
    c_tag = simple_consumer(args, g_tag, {topic: "TagA"}, "normal: SimpleConsumer (TagA)")
    p = producer(args, [topic], "normal: Producer")
    if not (c_all and c_tag and p):
        return
    # A first (empty) receive makes each group's position before anything is sent.
    for c in (c_all, c_tag):
        receive(c, None, 0.1)
    n = args.count
    sent, failures = {}, []
    t = time.monotonic()
    for i in range(n):
        tag = "TagA" if i % 2 == 0 else "TagB"
        keys = ["%s-k%d" % (topic, i)]
        props = {PROP: "grpc", "seq": str(i)}
        body = body_of(i, big_every=100)
        r = send(p, message(topic, body, tag, keys[0], props), "normal: send #%d" % i)
        if r is None or not r.message_id:
            failures.append(i)
            if len(failures) > 5:
                break
            continue
        sent[r.message_id] = (body, tag, keys, props)
    took = time.monotonic() - t
    progress("normal: %d sends in %.2fs" % (len(sent), took))
    check("normal: %d sends answered with a message id each" % n, len(sent) == n and not failures,
          "%d ok, failed: %s" % (len(sent), sample(failures)))
    ids = list(sent)
    check("normal: message ids are distinct 34-hex 5.x ids",
          len(set(ids)) == len(ids) and all(re.fullmatch(r"[0-9A-F]{34}", i) for i in ids), sample(ids, 2))

    # Up to 150 s (within the run's --deadline), though one broker drains in about a
    # second. Behind a CLUSTER proxy the 5.x python client picks each receive's queue at
    # random (it builds a new selector a call), so once one broker is drained half the
    # receives go there and each holds the 5 s long poll (the proxy's minimum). The 4
    # receives the other broker may still need then took 12 misses or more (60 s, the old
    # budget) once in 57 runs; 150 s allows about 28: missed about twice in 10^6 runs.
    t = time.monotonic()
    got, errs, _ = receive(c_all, len(sent), dl.budget(150))
    progress("normal: %d of %d received in %.1fs" % (len({g["id"] for g in got}), len(sent), time.monotonic() - t))
    check("normal: receive and ack raised nothing", not errs, sample(errs, 3))
    expect_intact("normal", sent, got)
    check("normal: each message delivered once (no duplicates)", not duplicates(got), sample(duplicates(got)))
    firsts = [g["id"] for g in got if g["attempt"] != 1]
    check("normal: delivery_attempt is 1 on first delivery", not firsts, sample(firsts))
    # Acked: nothing comes again within one more long poll.
    again, _, _ = receive(c_all, None, 4)
    check("normal: acked messages never come again", not again, sample([a["id"] for a in again]))

    want_a = {i: v for i, v in sent.items() if v[1] == "TagA"}
    t = time.monotonic()
    got_a, errs_a, _ = receive(c_tag, None, dl.budget(150),
                               stop_when=lambda recs: len({r["id"] for r in recs}) >= len(want_a))
    progress("normal (TagA): %d of %d received in %.1fs" % (len({r["id"] for r in got_a}), len(want_a),
                                                          time.monotonic() - t))
    extra, _, _ = receive(c_tag, None, 3)
    got_a += extra
    check("normal: tag filter TagA receives only TagA", all(g["tag"] == "TagA" for g in got_a),
          sample([(g["id"], g["tag"]) for g in got_a if g["tag"] != "TagA"]))
    expect_intact("normal (TagA)", want_a, [g for g in got_a if g["tag"] == "TagA"])
    check("normal (TagA): receive and ack raised nothing", not errs_a, sample(errs_a, 3))
    for c, w in ((p, "normal: Producer"), (c_all, "normal: SimpleConsumer (*)"), (c_tag, "normal: SimpleConsumer (TagA)")):
        stop(c, w)


def scenario_fifo(args, dl):
    topic = args.prefix + "-fifo"
    plain = args.prefix + "-fifo-normal"
    group = topic + "-g"
    create_topic(args, topic, "FIFO")
    create_topic(args, plain, "NORMAL")
    create_group(args, group, "-o", "true")
    lis = Listener()
    pc = push_consumer(args, group, topic, lis, "fifo: PushConsumer")
    p = producer(args, [topic, plain], "fifo: Producer")
    if not (pc and p):
        return
    check("fifo: the PushConsumer took fifo from the server's settings", pc.fifo is True, "fifo=%r" % pc.fifo)
    groups, per = ("A", "B", "C"), args.fifo_count
    sent = {}
    for s in range(per):
        for g in groups:
            r = send(p, message(topic, "fifo %s %d" % (g, s), "TagF", "%s-%s-%d" % (topic, g, s),
                                {PROP: "grpc", "seq": str(s)}, group=g), "fifo: send %s#%d" % (g, s))
            if r is not None:
                sent[r.message_id] = (g, s)
    check("fifo: %d sends with message groups answered" % (per * len(groups)), len(sent) == per * len(groups),
          "%d answered" % len(sent))
    lis.wait(lambda seen: {r["id"] for r in seen} >= set(sent), dl.budget(60))
    time.sleep(min(2, dl.budget(2)))
    seen = lis.snapshot()
    missing = [i for i in sent if i not in {r["id"] for r in seen}]
    check("fifo: every message consumed", not missing, "missing %d: %s" % (len(missing), sample(missing)))
    for g in groups:
        seqs = [int(r["props"].get("seq", -1)) for r in seen if r["group"] == g]
        check("fifo: group %s consumed in send order, once (0..%d)" % (g, per - 1), seqs == list(range(per)),
              "got %s" % sample(seqs, 40))
    wrong = [r["id"] for r in seen if r["id"] in sent and sent[r["id"]][0] != r["group"]]
    check("fifo: message_group intact on every message", not wrong, sample(wrong))
    check("fifo: listener raised nothing", not lis.errors, sample(lis.errors))
    ok, err = bounded(lambda: p.send(message(plain, "not fifo", group="A")), 15, "fifo: send to NORMAL")
    check("fifo: a message_group send to a NORMAL topic is refused by the client",
          not ok and "IllegalArgumentException" in str(err), "sent anyway" if ok else err)
    stop(pc, "fifo: PushConsumer")
    stop(p, "fifo: Producer")


def scenario_delay(args, dl):
    topic = args.prefix + "-delay"
    c, p = consumer_and_producer(args, "delay", topic, "DELAY")
    if not c:
        return
    n, sent = args.delay_count, {}
    for i in range(n):
        due = int(time.time()) + 4
        r = send(p, message(topic, "delay %d" % i, "TagD", "%s-k%d" % (topic, i), {PROP: "grpc"}, deliver_at=due),
                 "delay: send #%d" % i)
        if r is not None:
            sent[r.message_id] = due
    check("delay: %d sends with delivery_timestamp answered" % n, len(sent) == n, "%d answered" % len(sent))
    # One more, due in 10 s, recalled at once with its receipt's recall handle.
    recall_due = int(time.time()) + 10
    rr = send(p, message(topic, "recalled", "TagD", "%s-recalled" % topic, {PROP: "grpc"},
                         deliver_at=recall_due), "delay: send the one to recall")
    recalled = rr.message_id if rr is not None else None
    check("delay: the send receipt of a delayed message carries a recall handle",
          rr is not None and bool(rr.recall_handle), "no recall handle")
    if rr is not None and rr.recall_handle:
        ok, rid = bounded(lambda: p.recall_message(topic, rr.recall_handle), 15, "delay: recall")
        check("delay: recall_message answers the recalled message id", ok and rid == recalled,
              "answered %r, want %s" % (rid, recalled))
    ok, err = bounded(lambda: p.recall_message(topic, "not-a-recall-handle"), 15, "delay: recall garbage")
    check("delay: recall_message with a garbage handle raises BadRequest/NotFoundException",
          not ok and ("BadRequestException" in str(err) or "NotFoundException" in str(err)),
          "answered OK" if ok else err)
    got, errs, _ = receive(c, len(sent), dl.budget(30))
    # Past the recalled one's due time (+2 s): it must not arrive.
    extra, _, _ = receive(c, None, dl.budget(max(2.0, recall_due + 2 - time.time())))
    got += extra
    check("delay: the recalled message never arrives (waited past its due time)",
          recalled is None or recalled not in {g["id"] for g in got}, "it arrived")
    got = [g for g in got if g["id"] != recalled]
    missing = [i for i in sent if i not in {g["id"] for g in got}]
    check("delay: every delayed message received", not missing, sample(missing))
    early = ["%s %.2fs early" % (g["id"], sent[g["id"]] - g["at"]) for g in got
             if g["id"] in sent and g["at"] < sent[g["id"]] - 1.0]
    check("delay: none received before due - 1 s", not early, sample(early))
    late = ["%s %.1fs late" % (g["id"], g["at"] - sent[g["id"]]) for g in got
            if g["id"] in sent and g["at"] > sent[g["id"]] + 10]
    check("delay: each received within 10 s of due", not late, sample(late))
    check("delay: each delivered once", not duplicates(got), sample(duplicates(got)))
    check("delay: receive and ack raised nothing", not errs, sample(errs, 3))
    stop_both("delay", c, p)


def scenario_transaction(args, dl):
    r = rmq()
    topic = args.prefix + "-tx"
    checks = []  # (message id, when)
    lock = threading.Lock()

    class Checker(r.TransactionChecker):
        def check(self, m):
            with lock:
                checks.append((m.message_id, time.time(), m.body))
            return r.TransactionResolution.COMMIT

    c, p = consumer_and_producer(args, "transaction", topic, "TRANSACTION", checker=Checker())
    if not c:
        return
    ids = {}
    for kind in ("commit", "rollback", "unresolved"):
        tx = p.begin_transaction()
        m = message(topic, "tx %s" % kind, "TagT", "%s-%s" % (topic, kind), {PROP: "grpc"})
        ok, receipt = bounded(lambda: p.send(m, tx), 30, "transaction: half %s" % kind)
        check("transaction: half message (%s) sent, with a transaction id" % kind,
              ok and receipt.message_id and receipt.transaction_id, receipt if not ok else "")
        if not ok:
            continue
        ids[kind] = receipt.message_id
        if kind == "commit":
            ok, err = bounded(tx.commit, 15, "transaction: commit")
            check("transaction: commit answered OK", ok, "" if ok else err)
        elif kind == "rollback":
            ok, err = bounded(tx.rollback, 15, "transaction: rollback")
            check("transaction: rollback answered OK", ok, "" if ok else err)
    sent_at = time.time()
    want = {ids.get("commit"), ids.get("unresolved")} - {None}
    got, errs, _ = receive(c, None, dl.budget(args.tx_wait),
                           stop_when=lambda recs: {g["id"] for g in recs} >= want)
    extra, _, _ = receive(c, None, 3)
    got += extra
    by_id = {}
    for g in got:
        by_id.setdefault(g["id"], []).append(g)
    check("transaction: the committed message delivered once",
          len(by_id.get(ids.get("commit"), [])) == 1, "%d deliveries" % len(by_id.get(ids.get("commit"), [])))
    check("transaction: the rolled-back message never delivered", ids.get("rollback") not in by_id,
          "delivered %d times" % len(by_id.get(ids.get("rollback"), [])))
    with lock:
        asked = list(checks)
    u = ids.get("unresolved")
    check("transaction: the broker's check-back reached the checker for the unresolved one",
          any(a[0] == u for a in asked),
          "checks: %s" % sample([(a[0], round(a[1] - sent_at, 1)) for a in asked]))
    check("transaction: the check-back carried the half message's body",
          any(a[0] == u and a[2] == b"tx unresolved" for a in asked), sample([a[2] for a in asked]))
    check("transaction: the unresolved one, committed by the checker, delivered once",
          len(by_id.get(u, [])) == 1, "%d deliveries" % len(by_id.get(u, [])))
    others = [a[0] for a in asked if a[0] != u]
    check("transaction: no check-back for the ended transactions", not others, sample(others))
    if by_id.get(u):
        progress("transaction: unresolved delivered %.1fs after sending" % (by_id[u][0]["at"] - sent_at))
    check("transaction: receive and ack raised nothing", not errs, sample(errs, 3))
    stop_both("transaction", c, p)


def scenario_simple(args, dl):
    topic = args.prefix + "-simple"
    c, p = consumer_and_producer(args, "simple", topic, "NORMAL")
    if not c:
        return
    ids = {}
    for kind in ("acked", "unacked", "changed"):
        r = send(p, message(topic, "simple %s" % kind, "TagS", "%s-%s" % (topic, kind), {PROP: "grpc"}),
                 "simple: send %s" % kind)
        if r is not None:
            ids[kind] = r.message_id
    invisible = args.invisible
    first, errs, objs = receive(c, len(ids), dl.budget(20), invisible=invisible, ack=False)
    t_recv = time.monotonic()
    check("simple: the three messages received, attempt 1",
          {g["id"] for g in first} == set(ids.values()) and all(g["attempt"] == 1 for g in first),
          "got %s" % sample([(g["id"], g["attempt"]) for g in first]))
    check("simple: first receive raised nothing", not errs, sample(errs, 3))
    if "acked" in ids and ids["acked"] in objs:
        ok, err = bounded(lambda: c.ack(objs[ids["acked"]]), 15, "ack")
        check("simple: ack answered OK", ok, "" if ok else err)
    if "changed" in ids and ids["changed"] in objs:
        before = objs[ids["changed"]].receipt_handle
        ok, err = bounded(lambda: c.change_invisible_duration(objs[ids["changed"]], 2), 15, "change invisible")
        check("simple: change_invisible_duration(2 s) answered OK", ok, "" if ok else err)
        check("simple: ... with a new receipt handle", objs[ids["changed"]].receipt_handle not in (None, "", before),
              "handle %r" % objs[ids["changed"]].receipt_handle)
    back, errs2, objs2 = receive(c, None, dl.budget(invisible + 25), invisible=invisible,
                                 stop_when=lambda recs: {g["id"] for g in recs} >= {ids.get("unacked"), ids.get("changed")})
    when = {g["id"]: (g["at"], g["attempt"]) for g in back}
    t0 = time.time() - (time.monotonic() - t_recv)  # the first receive's end, wall clock
    check("simple: the acked message never came back", ids.get("acked") not in when, "came back")
    u = when.get(ids.get("unacked"))
    check("simple: the unacked message came back with its message id, delivery_attempt 2",
          u is not None and u[1] == 2, "not back" if u is None else "attempt %d" % u[1])
    if u is not None:
        check("simple: ... no earlier than its invisible duration (%ds) - 1 s" % invisible,
              u[0] - t0 >= invisible - 1, "after %.1fs" % (u[0] - t0))
    ch = when.get(ids.get("changed"))
    check("simple: the one changed to 2 s came back sooner, delivery_attempt 2",
          ch is not None and ch[1] == 2 and ch[0] - t0 < invisible - 2,
          "not back" if ch is None else "after %.1fs, attempt %d" % (ch[0] - t0, ch[1]))
    check("simple: redelivered ones acked without error", not errs2, sample(errs2, 3))
    again, _, _ = receive(c, None, 4)
    check("simple: nothing comes after everything was acked", not again, sample([a["id"] for a in again]))
    ok, err = bounded(lambda: c.receive(1, 5), 20, "receive with invisible 5 s")
    check("simple: a receive with invisible duration 5 s (< 10 s) raises BadRequestException",
          not ok and "BadRequestException" in str(err), "answered %r" % (err,) if ok else err)
    # A garbage receipt handle.
    src = next(iter(objs2.values()), None) or next(iter(objs.values()), None)
    if src is not None:
        bogus = copy.copy(src)
        bogus.receipt_handle = "not-a-receipt-handle"
        ok, err = bounded(lambda: c.ack(bogus), 15, "ack garbage")
        check("simple: an ack with a garbage receipt handle raises BadRequestException",
              not ok and "BadRequestException" in str(err), "answered OK" if ok else err)
    stop_both("simple", c, p)


def scenario_push_retry_dlq(args, dl):
    topic = args.prefix + "-retry"
    group = topic + "-g"
    dlq = "%DLQ%" + group
    create_topic(args, topic, "NORMAL")
    create_group(args, group, "-r", "2")
    lis = Listener(fail=lambda rec: rec["keys"] == ["%s-X" % topic])
    pc = push_consumer(args, group, topic, lis, "push_retry_dlq: PushConsumer")
    p = producer(args, [topic], "push_retry_dlq: Producer")
    if not (pc and p):
        return
    x = send(p, message(topic, "fail me", "TagX", "%s-X" % topic, {PROP: "grpc"}), "push_retry_dlq: send X")
    others = {}
    for i in range(5):
        r = send(p, message(topic, "ok %d" % i, "TagO", "%s-k%d" % (topic, i), {PROP: "grpc"}),
                 "push_retry_dlq: send #%d" % i)
        if r is not None:
            others[r.message_id] = i
    if x is None:
        return
    xid = x.message_id
    lis.wait(lambda seen: sum(1 for r in seen if r["id"] == xid) >= 3, dl.budget(60))
    # Give the broker time for one more receive, which forwards it to the DLQ.
    found = None
    end = time.monotonic() + dl.budget(40)
    while time.monotonic() < end:
        rc, out = admin(args, "queryMsgByUniqueKey", "-t", dlq, "-i", xid, ok_codes=(0, 1))
        if rc == 0 and xid in out:
            found = out
            break
        time.sleep(1)
    seen = lis.snapshot()
    attempts = [r["attempt"] for r in seen if r["id"] == xid]
    check("push_retry_dlq: X redelivered with delivery_attempt 1, 2, 3 (retryMaxTimes 2)",
          attempts == [1, 2, 3], "attempts %s" % attempts)
    at = [r["at"] for r in seen if r["id"] == xid]
    gaps = [round(b - a, 1) for a, b in zip(at, at[1:])]
    progress("push_retry_dlq: X's redelivery gaps %s s" % gaps)
    check("push_retry_dlq: each redelivery after the backoff (>= 0.8 s)", gaps and all(g >= 0.8 for g in gaps),
          "gaps %s" % gaps)
    check("push_retry_dlq: X is in %s (tern-admin queryMsgByUniqueKey)" % dlq, found is not None,
          "not found within the budget")
    n = stored_in(args, dlq)
    check("push_retry_dlq: %s holds exactly 1 message (tern-admin topicStatus)" % dlq, n == 1, "holds %r" % n)
    time.sleep(min(3, dl.budget(3)))
    seen = lis.snapshot()
    attempts_after = [r["attempt"] for r in seen if r["id"] == xid]
    check("push_retry_dlq: X not delivered again after its DLQ move", attempts_after == attempts,
          "attempts %s" % attempts_after)
    bad = {}
    for r in seen:
        if r["id"] in others:
            bad.setdefault(r["id"], []).append(r["attempt"])
    retried = {i: a for i, a in bad.items() if a != [1]}
    missing = [i for i in others if i not in bad]
    check("push_retry_dlq: the other messages consumed once each, attempt 1, never retried",
          not retried and not missing, "retried %s, missing %s" % (retried, missing))
    stop(pc, "push_retry_dlq: PushConsumer")
    stop(p, "push_retry_dlq: Producer")


def cpp_script():
    return os.path.join(_HERE, "cpp_interop.py")


def run_cpp(args, argv, seconds):
    """Runs cpp_interop.py with the C++ client's venv; returns (rc, stdout lines)."""
    cmd = [args.cpp_python, cpp_script(), "--namesrv", args.namesrv, "--prefix", args.prefix,
           "--deadline", str(int(seconds))] + argv
    progress("$ %s" % " ".join(cmd))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 15)
    except subprocess.TimeoutExpired:
        return -1, []
    for line in (p.stderr or "").splitlines()[-30:]:
        progress("  cpp| %s" % line)
    return p.returncode, (p.stdout or "").splitlines()


def scenario_cross(args, dl):
    if not args.cpp_python:
        check("cross: --cpp-python given (the C++ client's venv)", False, "missing")
        return
    # 1. 5.x producer -> C++ 4.x push consumer.
    t1 = args.prefix + "-cross5to4"
    create_topic(args, t1, "NORMAL", queues=4)
    p = producer(args, [t1], "cross: Producer")
    if not p:
        return
    sent = {}
    for i in range(args.cross_count):
        key = "%s-k%d" % (t1, i)
        body = body_of(i, big_every=10)
        r = send(p, message(t1, body, "TagX", key, {PROP: "grpc", "seq": str(i)}), "cross: send #%d" % i)
        if r is not None:
            sent[key] = (r.message_id, body)
    stop(p, "cross: Producer")
    with tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False) as f:
        f.write("\n".join(sent) + "\n")
        keys_file = f.name
    rc, lines = run_cpp(args, ["--dump-only", "--topic", t1, "--expect-keys", keys_file], dl.budget(90, 20))
    os.unlink(keys_file)
    got = {}
    for line in lines:
        if line.startswith("GOT "):
            rec = json.loads(line[4:])
            got.setdefault(rec["key"], rec)
    check("cross: the C++ consumer ran to its end (exit 0)", rc == 0,
          "exit %s; %s" % (rc, sample([x for x in lines if x.startswith("FAIL")], 3)))
    missing = [k for k in sent if k not in got]
    check("cross: the C++ consumer got every 5.x message", not missing, sample(missing))
    bad = []
    for k, (mid, body) in sent.items():
        g = got.get(k)
        if g is None:
            continue
        if g["body"].encode("utf-8") != body:
            bad.append("%s body (%d bytes)" % (k, len(g["body"])))
        elif g["tags"] != "TagX":
            bad.append("%s tag %r" % (k, g["tags"]))
        elif g["prop"] != "grpc":
            bad.append("%s property %r" % (k, g["prop"]))
        elif g["uniq"] != mid:
            bad.append("%s UNIQ_KEY %r != 5.x id %s" % (k, g["uniq"], mid))
    check("cross: body, tag, keys, user property and UNIQ_KEY == the 5.x message id", not bad, sample(bad, 3))

    # 2. C++ producer -> 5.x SimpleConsumer.
    t2 = args.prefix + "-cross4to5"
    group = t2 + "-g"
    create_topic(args, t2, "NORMAL", queues=4)
    create_group(args, group)
    c = simple_consumer(args, group, {t2: "*"}, "cross: SimpleConsumer")
    if not c:
        return
    receive(c, None, 0.1)
    n = args.cross_count
    rc, lines = run_cpp(args, ["--send-only", "--topic", t2, "--count", str(n), "--big", "5000"], dl.budget(60, 20))
    acks = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 4 and parts[0] == "ACK":
            acks[parts[2]] = parts[1]  # msg id (UNIQ_KEY) -> key
    check("cross: the C++ producer's %d sends acknowledged" % n, rc == 0 and len(acks) == n,
          "exit %s, %d ACK lines" % (rc, len(acks)))
    expected = {}
    for mid, key in acks.items():
        i = int(key.rsplit("k", 1)[1])
        body = ("restart %s" % key).encode() + (b"x" * 5000 if i % 10 == 3 else b"")
        expected[mid] = (body, "TagR", [key], {"seq": str(i)})
    got2, errs, _ = receive(c, len(expected), dl.budget(40))
    expect_intact("cross (C++ -> 5.x)", expected, got2)
    check("cross: a > 4 KiB body (compressed by the C++ client) arrived inflated",
          any(len(v[0]) > 4096 and g["id"] == mid and g["body"] == v[0] for mid, v in expected.items() for g in got2),
          "no big body matched")
    check("cross: receive and ack raised nothing", not errs, sample(errs, 3))
    stop(c, "cross: SimpleConsumer")


def scenario_errors(args, dl):
    ex = exc_types()
    topic = args.prefix + "-errors"
    fifo = topic + "-fifo"
    create_topic(args, topic, "NORMAL")
    create_topic(args, fifo, "FIFO")
    p = producer(args, [topic, fifo], "errors: Producer")
    if not p:
        return
    missing_topic = args.prefix + "-no-such-topic"
    # The client's route manager logs the QueryRoute status and raises a plain Exception of
    # its own, so the status is read twice: the send fails, and query_route (the same
    # request, checked with the client's own result checker) raises NotFoundException
    # (TOPIC_NOT_FOUND).
    ok, err = bounded(lambda: p.send(message(missing_topic, "x")), 30, "errors: unknown topic")
    check("errors: a send to an unknown topic fails (no route)",
          not ok and "failed to fetch topic" in str(err), "sent" if ok else err)
    ok, err = bounded(lambda: query_route(p, missing_topic), 30, "errors: QueryRoute of an unknown topic")
    check("errors: QueryRoute of an unknown topic raises NotFoundException (40402 TOPIC_NOT_FOUND)",
          not ok and "NotFoundException" in str(err) and "40402" in str(err), "answered %s" % err if ok else err)
    try:
        m = message(topic, "x")
        m.tag = "a|b"
        check("errors: tag 'a|b' is refused by the client", False, "accepted")
    except ex.IllegalArgumentException:
        check("errors: tag 'a|b' is refused by the client", True)
    # The same tag on the wire (past the client's own check) is the broker's to refuse.
    m = message(topic, "x")
    m._Message__tag = "a|b"
    ok, err = bounded(lambda: p.send(m), 30, "errors: tag a|b on the wire")
    check("errors: tag 'a|b' sent anyway raises BadRequestException (ILLEGAL_MESSAGE_TAG)",
          not ok and "BadRequestException" in str(err), "sent" if ok else err)
    long_group = "g" * 64
    ok, err = bounded(lambda: p.send(message(fifo, "x", group=long_group)), 30, "errors: long group")
    check("errors: a 64-byte message_group raises BadRequestException (ILLEGAL_MESSAGE_GROUP)",
          not ok and "BadRequestException" in str(err), "sent" if ok else err)
    # The broker still serves the producer after the refusals.
    r = send(p, message(topic, "after errors", "TagE"), "errors: a good send after the refusals")
    check("errors: a good send after the refusals is answered", r is not None and bool(r.message_id))
    stop(p, "errors: Producer")


def scenario_acl(args, dl):
    """The broker has aclEnable=true (the driver writes plain_acl.yml): the client's own
    MQv2-HMAC-SHA1 signature over x-mq-date-time is what is checked. --access-key /
    --secret-key name an account with PUB|SUB on the topic; ACL_READER / reader_secret has
    SUB only. tern-admin signs with TERN_ACCESS_KEY / TERN_SECRET_KEY (an admin)."""
    r = rmq()
    topic = args.prefix + "-acl"
    group = topic + "-g"
    create_topic(args, topic, "NORMAL")
    p = producer(args, [topic], "acl: Producer with the right account")
    c = simple_consumer(args, group, {topic: "*"}, "acl: SimpleConsumer with the right account")
    if not p or not c:
        return
    sent = send(p, message(topic, "signed", "TagA"), "acl: a signed send")
    check("acl: the right account sends", sent is not None)
    got, _, _ = receive(c, 1, 20)
    check("acl: the right account receives what it sent",
          len(got) == 1 and sent is not None and got[0]["id"] == sent.message_id, sample(got))

    def route_refused(access_key, secret_key, what):
        # The client's startup turns a refused QueryRoute into a plain "failed to fetch
        # topic route"; query_route shows the status (as in the errors scenario).
        q = r.Producer(config(args, access_key, secret_key), (topic,))
        # Its startup logs the refused route and goes on (the send would then fail).
        bounded(q.startup, 30, what + " startup")
        ok, err = bounded(lambda: query_route(q, topic), 30, what + " QueryRoute")
        bounded(q.shutdown, 20, what + " shutdown")
        return ok, err
    ok, err = route_refused(args.access_key, "not-the-secret", "acl: a wrong secret key")
    check("acl: a wrong secret key is refused (UnauthorizedException)",
          not ok and "UnauthorizedException" in str(err) and "40100" in str(err), "answered" if ok else err)
    ok, err = route_refused("", "", "acl: no credentials")
    check("acl: no credentials are refused (UnauthorizedException)",
          not ok and "UnauthorizedException" in str(err) and "40100" in str(err), "answered" if ok else err)

    def attempt(access_key, secret_key, what):
        q = r.Producer(config(args, access_key, secret_key), (topic,))
        ok, err = bounded(q.startup, 30, what + " startup")
        if ok:
            ok, err = bounded(lambda: q.send(message(topic, "refused?")), 30, what)
        bounded(q.shutdown, 20, what + " shutdown")
        return ok, err
    ok, err = attempt("ACL_READER", "reader_secret", "acl: a SUB-only account")
    check("acl: an account with only SUB on the topic cannot send",
          not ok and ("Unauthorized" in str(err) or "40100" in str(err)), "sent" if ok else err)
    rc = r.SimpleConsumer(config(args, "ACL_READER", "reader_secret"), group + "-reader",
                          {topic: r.FilterExpression("*")}, await_duration=3)
    if start(rc, "acl: SimpleConsumer with the SUB-only account"):
        got, _, _ = receive(rc, 2, 20)
        check("acl: the SUB-only account receives", len(got) >= 1, sample(got))
        stop(rc, "acl: SimpleConsumer with the SUB-only account")
    stop(p, "acl: Producer with the right account")
    stop(c, "acl: SimpleConsumer with the right account")


def scenario_tls(args, dl):
    """The broker serves TLS on the gRPC port (the driver gives tls.server.* and sets
    GRPC_DEFAULT_SSL_ROOTS_FILE_PATH to its certificate): the client with tls_enable=True
    sends and receives (the port is permissive: tern-admin and plaintext clients share it)."""
    r = rmq()
    topic = args.prefix + "-tls"
    create_topic(args, topic, "NORMAL")
    p = r.Producer(config(args), (topic,), tls_enable=True)
    c = r.SimpleConsumer(config(args), topic + "-g", {topic: r.FilterExpression("*")},
                         await_duration=3, tls_enable=True)
    if not start(c, "tls: SimpleConsumer over TLS") or not start(p, "tls: Producer over TLS"):
        return
    ids = []
    for i in range(5):
        m = send(p, message(topic, "over tls %d" % i, "TagT"), "tls: send %d" % i)
        if m:
            ids.append(m.message_id)
    check("tls: 5 sends over TLS answered", len(ids) == 5, ids)
    got, _, _ = receive(c, 5, 30)
    check("tls: all 5 received over TLS, intact",
          sorted(g["id"] for g in got) == sorted(ids) and all(g["body"].startswith(b"over tls") for g in got),
          sample(got))
    stop(p, "tls: Producer over TLS")
    stop(c, "tls: SimpleConsumer over TLS")


def scenario_restart(args, dl):
    topic = args.prefix + "-restart"
    group = topic + "-g"  # consumer_and_producer's; a new consumer of it after the restart
    c, p = consumer_and_producer(args, "restart", topic, "NORMAL", queues=4)
    if not c:
        return
    n, invisible = 100, 20
    sent = {}
    for i in range(n):
        r = send(p, message(topic, "restart %d" % i, "TagR", "%s-k%d" % (topic, i), {PROP: "grpc"}),
                 "restart: send #%d" % i)
        if r is not None:
            sent[r.message_id] = i
    check("restart: %d sends answered" % n, len(sent) == n, "%d answered" % len(sent))
    first, errs, objs = receive(c, 50, dl.budget(30), invisible=invisible, ack=False, batch=10)
    # The first 50 distinct (a last batch can bring a few more: those stay unacked too and
    # are expected back with the rest).
    held, seen_ids = [], set()
    for g in first:
        if g["id"] not in seen_ids:
            seen_ids.add(g["id"])
            held.append(g["id"])
    held = held[:50]
    t_recv = time.time()
    acked, unacked = held[:25], held[25:]
    ack_errs = []
    for i in acked:
        ok, err = bounded(lambda: c.ack(objs[i]), 15, "ack")
        if not ok:
            ack_errs.append(err)
    check("restart: 50 or more received before the restart, 25 acked", len(held) >= 50 and not ack_errs and not errs,
          "%d held, errors %s" % (len(held), sample(errs + ack_errs, 3)))
    print("RESTART-NOW", flush=True)
    progress("restart: waiting for the driver's line on stdin (broker restart, %s)" % args.restart_kind)
    ok, line = bounded(sys.stdin.readline, dl.budget(60), "stdin")
    check("restart: the driver restarted the broker", ok and line.strip() != "", "no line on stdin")
    t_back = time.time()
    # The same Producer sends again: it reconnects by itself (its send retries ride it out).
    r = None
    end = time.monotonic() + dl.budget(30)
    while r is None and time.monotonic() < end:
        okr, r = bounded(lambda: p.send(message(topic, "after restart", "TagR", "%s-after" % topic)), 30, "send after")
        if not okr:
            r = None
            time.sleep(1)
    check("restart: the same Producer sends after the restart", r is not None)
    if r is not None:
        sent[r.message_id] = n
    want = (set(sent) - set(acked))
    # The same SimpleConsumer: its first receive that works after the restart. The client
    # writes its settings again only every 300 s (and rebuilds its Telemetry stream only when
    # such a write fails), so this waits --reconnect-wait seconds at most.
    after, errs2 = [], []
    end = time.monotonic() + dl.budget(args.reconnect_wait)
    t_first = None
    while time.monotonic() < end:
        recs, errs, _ = receive(c, None, 0.1, stop_when=lambda recs: True)
        after += recs
        if not errs:
            t_first = time.time()
            break
        errs2 += errs
        time.sleep(1)
    check("restart: the same SimpleConsumer receives again within %ds (it reconnects by itself)"
          % args.reconnect_wait, t_first is not None,
          "still failing: %s" % sample(sorted(set(errs2)), 2))
    if t_first is not None:
        progress("restart: the SimpleConsumer received again %.1fs after the driver's line" % (t_first - t_back))
        more, errs3, _ = receive(c, None, dl.budget(invisible + 40),
                                 stop_when=lambda recs: {g["id"] for g in after + recs} >= want)
        after += more
        check("restart: receive and ack after the restart raised nothing", not errs3, sample(errs3, 3))
    else:
        # What the broker kept is checked anyway, with a new SimpleConsumer in the same group.
        c2 = simple_consumer(args, group, {topic: "*"}, "restart: a new SimpleConsumer (same group)")
        if c2:
            more, errs3, _ = receive(c2, None, dl.budget(invisible + 40),
                                     stop_when=lambda recs: {g["id"] for g in after + recs} >= want)
            after += more
            check("restart: the new SimpleConsumer's receives and acks raised nothing", not errs3, sample(errs3, 3))
            stop(c2, "restart: the new SimpleConsumer")
    t_after = {}
    for g in after:
        t_after.setdefault(g["id"], g)
    missing = [i for i in want if i not in t_after]
    check("restart: everything not acked was received after the restart (%d)" % len(want), not missing,
          "missing %d: %s" % (len(missing), sample(missing)))
    back_acked = [i for i in acked if i in t_after]
    came = [t_after[i] for i in unacked if i in t_after]
    check("restart: the %d unacked came back" % len(unacked), len(came) == len(unacked),
          "%d came back" % len(came))
    if args.restart_kind == "kill":
        # After kill -9 the group's consumed offsets and acks of the last seconds may be lost
        # (RocketMQ flushes offsets every flushConsumerOffsetInterval, 5 s): messages come
        # again, at least once. Only what the broker acknowledged to the producer must stay.
        progress("restart (kill -9): %d of the %d acked came again; unacked came back with attempts %s"
                 % (len(back_acked), len(acked), sorted({g["attempt"] for g in came})))
    else:
        check("restart: no acked message came back", not back_acked, sample(back_acked))
        check("restart: ... with delivery_attempt >= 2", all(g["attempt"] >= 2 for g in came),
              sample([(g["id"], g["attempt"]) for g in came if g["attempt"] < 2]))
        early = ["%s after %.1fs" % (g["id"], g["at"] - t_recv) for g in came if g["at"] - t_recv < invisible - 1]
        check("restart: ... not before their invisible time (%ds)" % invisible, not early, sample(early))
    stray = [i for i in t_after if i not in sent]
    check("restart: nothing that was not sent", not stray, sample(stray))
    progress("restart: back %.1fs after the driver's line" % (time.time() - t_back))
    stop_both("restart", c, p)


SCENARIOS = {
    "normal": scenario_normal,
    "fifo": scenario_fifo,
    "delay": scenario_delay,
    "transaction": scenario_transaction,
    "simple": scenario_simple,
    "push_retry_dlq": scenario_push_retry_dlq,
    "cross": scenario_cross,
    "errors": scenario_errors,
    "restart": scenario_restart,
    "acl": scenario_acl,
    "tls": scenario_tls,
}
DEFAULT = "normal,fifo,delay,transaction,simple,push_retry_dlq,errors"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", required=True, help="the broker's gRPC endpoint, host:port")
    ap.add_argument("--namesrv", required=True, help="name server(s) for tern-admin, host:port[;host:port]")
    ap.add_argument("--admin", required=True, help="the tern-admin binary")
    ap.add_argument("--cluster", default="DefaultCluster", help="cluster topics and groups are created in")
    ap.add_argument("--prefix", default=None, help="topic/group prefix (default: TernGrpc<random>)")
    ap.add_argument("--scenario", action="append", default=None,
                    help="scenario(s), repeatable or comma-separated (default %s); known: %s"
                    % (DEFAULT, ",".join(SCENARIOS)))
    ap.add_argument("--count", type=int, default=200, help="normal: messages sent")
    ap.add_argument("--fifo-count", type=int, default=30, help="fifo: messages per message group")
    ap.add_argument("--delay-count", type=int, default=5)
    ap.add_argument("--cross-count", type=int, default=20)
    ap.add_argument("--invisible", type=int, default=12, help="simple: invisible duration, seconds (>= 10)")
    # 90: behind a CLUSTER proxy a receive may hold 5 s on the broker without the message
    # (the client picks brokers at random; see scenario_normal).
    ap.add_argument("--tx-wait", type=float, default=90.0,
                    help="transaction: seconds to wait for the check-back's commit")
    ap.add_argument("--restart-kind", choices=("term", "kill"), default="term",
                    help="restart: how the driver stops the broker (kill: no timing check on the unacked)")
    ap.add_argument("--reconnect-wait", type=int, default=30,
                    help="restart: seconds the same SimpleConsumer may take to receive again")
    ap.add_argument("--cpp-python", help="cross: the python of the C++ client's venv (.venv/bin/python)")
    ap.add_argument("--request-timeout", type=int, default=5, help="the clients' request timeout, seconds")
    ap.add_argument("--access-key", help="ACL account the clients sign with")
    ap.add_argument("--secret-key")
    ap.add_argument("--deadline", type=float, default=240.0,
                    help="global deadline in seconds; past it, report and exit 1")
    args = ap.parse_args(argv)
    args.scenario_list = [s.strip() for arg in (args.scenario or [DEFAULT]) for s in arg.split(",") if s.strip()]
    settle_args(ap, args, "TernGrpc", 80, SCENARIOS)
    if args.invisible < 10:
        ap.error("--invisible must be at least 10 (the proxy's minInvisibleTimeMillsForRecv)")
    return args


def run(args, dl):
    """The run proper (run_main parsed the arguments before and prints the summary after)."""
    progress("client logs go to %s/logs/rocketmq_python" % os.environ.get("HOME", "?"))
    progress("endpoint %s, name server %s, prefix %s" % (args.endpoint, args.namesrv, args.prefix))
    if not client_loads(rmq, "rocketmq-python-client"):
        return
    for name in args.scenario_list:
        if dl.left() < 20:
            check("%s: scenario ran" % name, False, "skipped: global deadline near")
            continue
        progress("--- scenario %s" % name)
        t = time.monotonic()
        try:
            SCENARIOS[name](args, dl)
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            check("%s: scenario ran to the end" % name, False, "%s: %s" % (type(e).__name__, e))
        progress("--- scenario %s took %.1fs" % (name, time.monotonic() - t))


if __name__ == "__main__":
    run_main(parse_args, run, sys.argv[1:])
