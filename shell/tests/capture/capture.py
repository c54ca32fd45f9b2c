"""Records the frames the real C++ RocketMQ client sends, as golden test fixtures.

A tiny fake name server + broker (one port plays both) answers just enough for the
client to produce and consume; the first frame of each kind is saved verbatim (length
prefix included) under shell/tests/fixtures/. Re-run with:

    HOME=$(mktemp -d) /tmp/rmqvenv/bin/python shell/tests/capture/capture.py

The fake server writes JSON headers with string extFields (the C++ client ignores
numbers) and route data with unquoted brokerAddrs keys, as a Java name server would for
the C++ client's version.
"""
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")
saved = {}
lock = threading.Lock()
client_ids = set()

LABELS = {
    105: "get_routeinfo_by_topic", 34: "heart_beat", 10: "send_message", 310: "send_message_v2",
    320: "send_batch_message", 11: "pull_message", 14: "query_consumer_offset", 15: "update_consumer_offset",
    30: "get_max_offset", 31: "get_min_offset", 35: "unregister_client", 38: "get_consumer_list_by_group",
    41: "lock_batch_mq", 42: "unlock_batch_mq",
}


def label_for(code, header, body):
    label = LABELS.get(code, "code_%d" % code)
    ext = header.get("extFields") or {}
    if code == 10 and str(ext.get("batch")) in ("1", "true"):
        label = "send_message_batch"
    elif code == 10 and int(ext.get("sysFlag", 0)) & 1:
        label = "send_message_compressed"
    elif code == 34:
        hb = json.loads(body.decode("utf-8", "replace") or "{}")
        label = "heart_beat_consumer" if hb.get("consumerDataSet") else "heart_beat_producer"
    return label


def save(label, frame):
    with lock:
        if label in saved:
            return
        saved[label] = True
    with open(os.path.join(FIXTURES, label + ".bin"), "wb") as f:
        f.write(frame)


def frame(code, opaque, ext=None, body=b"", remark=None):
    header = {"code": code, "flag": 1, "language": "JAVA", "opaque": opaque, "version": 401,
              "serializeTypeCurrentRPC": "JSON"}
    if ext:
        header["extFields"] = {k: str(v) for k, v in ext.items()}
    if remark is not None:
        header["remark"] = remark
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">II", 4 + len(h) + len(body), len(h)) + h + body


def respond(port, code, opaque, ext, body):
    addr = "127.0.0.1:%d" % port
    if code == 105:
        route = ('{"brokerDatas":[{"brokerAddrs":{0:"%s"},"brokerName":"broker-a","cluster":"DefaultCluster"}],'
                 '"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":2,'
                 '"topicSynFlag":0,"topicSysFlag":0,"writeQueueNums":2}]}') % addr
        return frame(0, opaque, body=route.encode())
    if code == 34:
        hb = json.loads(body.decode("utf-8", "replace") or "{}")
        client_ids.add(hb.get("clientID", ""))
        return frame(0, opaque)
    if code in (10, 310, 320):
        return frame(0, opaque, {"msgId": "7F00000100002A9F0000000000000000", "queueId": ext.get("queueId", 0),
                                 "queueOffset": 0, "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})
    if code == 38:
        return frame(0, opaque, body=json.dumps({"consumerIdList": sorted(client_ids)}).encode())
    if code == 14:
        return frame(22, opaque, remark="Not found")
    if code in (30, 31):
        return frame(0, opaque, {"offset": 0})
    if code == 11:
        time.sleep(0.3)
        return frame(19, opaque, {"suggestWhichBrokerId": 0, "nextBeginOffset": ext.get("queueOffset", 0),
                                  "minOffset": 0, "maxOffset": 0})
    if code == 41:
        mq = json.loads(body.decode() or "{}").get("mqSet", [])
        return frame(0, opaque, body=json.dumps({"lockOKMQSet": mq}).encode())
    return frame(0, opaque)


def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def serve_conn(sock, port):
    wlock = threading.Lock()
    try:
        while True:
            length = struct.unpack(">I", read_exact(sock, 4))[0]
            payload = read_exact(sock, length)
            mark = struct.unpack(">I", payload[:4])[0]
            hlen = mark & 0xFFFFFF
            header = json.loads(payload[4:4 + hlen])
            body = payload[4 + hlen:]
            code, opaque = header["code"], header["opaque"]
            ext = header.get("extFields") or {}
            save(label_for(code, header, body), struct.pack(">I", length) + payload)
            if header.get("flag", 0) & 1:
                continue

            def answer(code=code, opaque=opaque, ext=ext, body=body):
                resp = respond(port, code, opaque, ext, body)
                with wlock:
                    try:
                        sock.sendall(resp)
                    except OSError:
                        pass

            threading.Thread(target=answer, daemon=True).start()
    except (EOFError, OSError, ValueError):
        sock.close()


def serve(listener, port):
    while True:
        try:
            s, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=serve_conn, args=(s, port), daemon=True).start()


def main():
    os.makedirs(FIXTURES, exist_ok=True)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    threading.Thread(target=serve, args=(listener, port), daemon=True).start()
    addr = "127.0.0.1:%d" % port
    client = os.path.join(HERE, "client.py")
    for args in (["produce", addr], ["consume", addr, "4"]):
        r = subprocess.run([sys.executable, client] + args, capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr[-2000:])
    print("saved:", ", ".join(sorted(saved)))


if __name__ == "__main__":
    main()
