"""Quick start: send three messages to Tern and consume them back with Apache RocketMQ's
own C++ client (PyPI `rocketmq==0.4.4`), unchanged.

    ./scripts/setup-python.sh
    .venv/bin/python examples/quickstart.py 127.0.0.1:9876
"""
import os
import sys
import tempfile
import time

# The C++ client writes its logs under $HOME/logs; keep them out of the way.
os.environ.setdefault("HOME", tempfile.mkdtemp())

from rocketmq.client import Message, Producer, PushConsumer  # noqa: E402

namesrv = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9876"
topic = "QuickStart"

producer = Producer("quickstart-producer")
producer.set_namesrv_addr(namesrv)
producer.start()
for i in range(3):
    msg = Message(topic)
    msg.set_keys(f"order-{i}")
    msg.set_tags("TagA")
    msg.set_body(f"hello tern {i}")
    result = producer.send_sync(msg)
    print(f"sent  {msg_id}" if (msg_id := result.msg_id) else "send failed", f"status={result.status}")
producer.shutdown()

received = []


def on_message(msg):
    received.append(msg.body.decode())
    print(f"got   {msg.id} tags={msg.tags.decode()} keys={msg.keys.decode()} body={msg.body.decode()!r}")


consumer = PushConsumer("quickstart-consumer")
consumer.set_namesrv_addr(namesrv)
consumer.subscribe(topic, on_message, "TagA")
consumer.start()
deadline = time.time() + 30
while len(received) < 3 and time.time() < deadline:
    time.sleep(0.2)
consumer.shutdown()
print(f"{len(received)} of 3 messages consumed")
sys.exit(0 if len(received) >= 3 else 1)
