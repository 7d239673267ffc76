#!/usr/bin/python3
"""An independent publisher of vLLM's KV-cache events, for the Go subscriber's conformance test.

Written from vLLM's sources, not from sluice's Go code:
  - vllm/distributed/kv_events.py: ZmqEventPublisher (PUB frames [topic, seq 8-byte big-endian,
    payload]; ROUTER replay: request [identity, "", start_seq], replies [identity, "", seq, payload]
    for buffered seq >= start_seq, then [identity, "", -1 signed 8-byte, ""]); EventBatch,
    BlockStored, BlockRemoved, AllBlocksCleared as msgspec Structs with omit_defaults and tag=True.
  - msgspec's encoding of such Structs: array_like=True -> [tag, field, ...] (SGLang, older vLLM),
    otherwise a map with the tag under "type" (current vLLM). Trailing/omitted defaults dropped.
Uses Debian's python3-zmq (libzmq) and python3-msgpack; msgspec is not packaged in Debian, so the
Structs are encoded by hand in msgspec's layout.

Usage: vllm_publisher.py array|map
Prints "READY <pub_port> <replay_port>", then reads commands, one per line, on stdin:
  script      publish the scripted batches below (each also buffered for replay)
  drop        buffer the next scripted "drop" batch without publishing it (a lost frame)
  lose        consume a sequence number that is neither published nor buffered (replay cannot repair)
  clear       publish AllBlocksCleared
  quit        exit
Between commands it publishes an empty batch every 20 ms, so a late subscriber sees the stream.
"""

import queue
import sys
import threading
import time

import msgpack
import zmq

MODE = sys.argv[1] if len(sys.argv) > 1 else "array"
END_SEQ = (-1).to_bytes(8, "big", signed=True)


def stored(hashes, parent, tokens, block_size, medium=None):
    # Field order of vllm BlockStored: block_hashes, parent_block_hash, token_ids, block_size,
    # lora_id, medium, lora_name (then defaulted fields, omitted).
    if MODE == "array":
        return ["BlockStored", hashes, parent, tokens, block_size, None, medium, None]
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
            "token_ids": tokens, "block_size": block_size, "lora_id": None, "medium": medium,
            "lora_name": None}


def removed(hashes, medium=None):
    if MODE == "array":
        return ["BlockRemoved", hashes, medium]
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium}


def cleared():
    if MODE == "array":
        return ["AllBlocksCleared"]
    return {"type": "AllBlocksCleared"}


def batch(events, dp_rank=0):
    if MODE == "array":
        return [time.time(), events, dp_rank]
    return {"ts": time.time(), "events": events, "data_parallel_rank": dp_rank}


# Scripted batches. Block size 4. Chain A: tokens 1..8 as two blocks (int hashes, one of them a
# full 64-bit unsigned value), then a child 9..12 linked by parent_block_hash. Chain B: bytes hashes
# (vLLM's sha256 ExternalBlockHash), stored then its second block removed. Chain C on CPU.
BIG = 2**64 - 5
SCRIPT = [
    [stored([11, BIG], None, [1, 2, 3, 4, 5, 6, 7, 8], 4, "GPU")],
    [stored([13], BIG, [9, 10, 11, 12], 4, "GPU")],
    [stored([b"\x01" * 32, b"\x02" * 32], None, [100, 101, 102, 103, 104, 105, 106, 107], 4)],
    [removed([b"\x02" * 32])],
    [stored([-7], None, [200, 201, 202, 203], 4, "CPU")],
]
# The batch a "drop" command loses on PUB: extends chain A by 13..16.
DROPPED = [stored([17], 13, [13, 14, 15, 16], 4, "GPU")]

ctx = zmq.Context.instance()
pub = ctx.socket(zmq.PUB)
pub.set_hwm(100_000)
pub_port = pub.bind_to_random_port("tcp://127.0.0.1")
router = ctx.socket(zmq.ROUTER)
replay_port = router.bind_to_random_port("tcp://127.0.0.1")

buffer = []  # (seq, payload), as the publisher's deque
seq = 0


def publish(events, send=True, keep=True):
    global seq
    payload = msgpack.packb(batch(events), use_bin_type=True)
    if send:
        pub.send_multipart((b"", seq.to_bytes(8, "big"), payload))
    if keep:
        buffer.append((seq, payload))
    seq += 1


def service_replay():
    frame = router.recv_multipart()
    if len(frame) != 3:
        return
    client_id, _, start = frame
    start_seq = int.from_bytes(start, "big")
    for s, buf in buffer:
        if s >= start_seq:
            router.send_multipart((client_id, b"", s.to_bytes(8, "big"), buf))
    router.send_multipart((client_id, b"", END_SEQ, b""))


commands = queue.Queue()


def read_stdin():
    for line in sys.stdin:
        commands.put(line.strip())
    commands.put("quit")


threading.Thread(target=read_stdin, daemon=True).start()
print(f"READY {pub_port} {replay_port}", flush=True)

poller = zmq.Poller()
poller.register(router, zmq.POLLIN)
while True:
    if dict(poller.poll(20)).get(router):
        service_replay()
        continue
    try:
        cmd = commands.get_nowait()
    except queue.Empty:
        publish([])
        continue
    if cmd == "script":
        for evs in SCRIPT:
            publish(evs)
    elif cmd == "drop":
        publish(DROPPED, send=False)
    elif cmd == "lose":
        publish([stored([99], None, [9, 9, 9, 9], 4)], send=False, keep=False)
    elif cmd == "clear":
        publish([cleared()])
    elif cmd == "quit":
        break
    print(f"OK {cmd} {seq}", flush=True)

pub.close(linger=0)
router.close(linger=0)
