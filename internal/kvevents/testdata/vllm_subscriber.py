#!/usr/bin/python3
"""An independent subscriber of vLLM's KV-cache events (libzmq through pyzmq, python3-msgpack), for
checking the simulator's publisher against a libzmq peer.

Written from vllm/distributed/kv_events.py (ZmqEventPublisher: PUB [topic, seq, payload]; ROUTER
replay answering [identity, "", start_seq] with [identity, "", seq, payload]... then seq -1) and
vLLM's example consumer (examples/online_serving/kv_events_subscriber.py), not from sluice's code.

Usage: vllm_subscriber.py <pub endpoint> <replay endpoint> <n>
Prints "SUBSCRIBED", receives batches until it has seen n events, then asks the replay socket for
everything from seq 0 and prints one JSON line: {"live": [...], "replayed": [...]} where each entry
is [seq, batch] with the msgpack payload decoded to plain lists/maps (bytes as hex).
"""

import json
import sys

import msgpack
import zmq


def plain(v):
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {plain(k): plain(x) for k, x in v.items()}
    return v


def events_of(batch):
    return batch["events"] if isinstance(batch, dict) else batch[1]


pub_ep, replay_ep, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = zmq.Context.instance()
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(pub_ep)
print("SUBSCRIBED", flush=True)

live, seen = [], 0
while seen < want:
    if not sub.poll(20000):
        sys.exit("no batch within 20 s")
    topic, seq_bytes, payload = sub.recv_multipart()
    batch = msgpack.unpackb(payload, raw=False)
    live.append([int.from_bytes(seq_bytes, "big"), plain(batch)])
    seen += len(events_of(batch))

dealer = ctx.socket(zmq.DEALER)
dealer.connect(replay_ep)
dealer.send_multipart((b"", (0).to_bytes(8, "big")))
replayed = []
while True:
    if not dealer.poll(20000):
        sys.exit("replay did not end within 20 s")
    _, seq_bytes, payload = dealer.recv_multipart()
    seq = int.from_bytes(seq_bytes, "big", signed=True)
    if seq == -1:
        if payload != b"":
            sys.exit("end-of-replay marker with a payload")
        break
    replayed.append([seq, plain(msgpack.unpackb(payload, raw=False))])

print(json.dumps({"live": live, "replayed": replayed}), flush=True)
sub.close(linger=0)
dealer.close(linger=0)
