"""Drives the real C++ RocketMQ client (PyPI rocketmq==0.4.4) against a name server.

Used by capture.py (to record the client's frames) and by the Rust interop test
(tests/cpp_client.rs, to check the C++ client accepts Tern's encodings). Prints one JSON
object per line so the caller can check results. Run with HOME pointing at a temp dir:
the C++ client writes its logs under $HOME/logs.

    python client.py produce 127.0.0.1:9876
    python client.py consume 127.0.0.1:9876 [seconds]
"""
import json
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer

TOPIC = "TernTopic"


# Consumer callbacks run on several C++ threads: one line at a time, or lines interleave
# and the caller drops what it cannot parse.
_out_lock = threading.Lock()


def out(**kw):
    line = json.dumps(kw) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def produce(namesrv):
    p = Producer("TernPG", timeout=3000)
    p.set_namesrv_addr(namesrv)
    p.start()
    try:
        m = Message(TOPIC)
        m.set_keys("key1 key2")
        m.set_tags("TagA")
        m.set_property("color", "blue")
        m.set_body("hello tern")
        r = p.send_sync(m)
        out(kind="sync", status=int(r.status), msg_id=r.msg_id, offset=r.offset)

        big = Message(TOPIC)
        big.set_tags("TagB")
        big.set_body("z" * 5000)
        r = p.send_sync(big)
        out(kind="compressed", status=int(r.status), msg_id=r.msg_id, offset=r.offset)

        batch = []
        for i in range(2):
            b = Message(TOPIC)
            b.set_tags("TagA")
            b.set_body("batch-%d" % i)
            batch.append(b)
        r = p.send_batch(batch)
        out(kind="batch", status=int(r.status), msg_id=r.msg_id, offset=r.offset)

        o = Message(TOPIC)
        o.set_body("oneway")
        p.send_oneway(o)
        out(kind="oneway")
    finally:
        p.shutdown()


def consume(namesrv, seconds):
    got = []

    def on_message(msg):
        got.append(msg)
        out(kind="received", topic=msg.topic, tags=msg.tags.decode() if isinstance(msg.tags, bytes) else msg.tags,
            body=msg.body.decode("utf-8", "replace"), msg_id=msg.id, queue_offset=msg.queue_offset,
            color=msg.get_property("color").decode() if msg.get_property("color") else None)

    c = PushConsumer("TernCG")
    c.set_namesrv_addr(namesrv)
    c.subscribe(TOPIC, on_message, "TagA || TagB")
    c.start()
    deadline = time.time() + seconds
    while time.time() < deadline:
        time.sleep(0.2)
    c.shutdown()
    out(kind="consumed", count=len(got))


if __name__ == "__main__":
    mode, addr = sys.argv[1], sys.argv[2]
    if mode == "produce":
        produce(addr)
    elif mode == "consume":
        consume(addr, float(sys.argv[3]) if len(sys.argv) > 3 else 5.0)
    else:
        sys.exit("unknown mode " + mode)
