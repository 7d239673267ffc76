#!/usr/bin/env python3
"""SGLang's scheduler Generate served as SGLang serves it: grpc.aio on gRPC's C core, its message
limits, everything else left at grpcio's defaults (BDP pings on). grpcio_test.go drives it: the request
id says what to answer. Requests and answers stay raw bytes (Debian's python3-grpcio, no generated
code), so the answers are written by hand: a GenerateResponse whose chunk (field 2) carries token ids
(field 1), with an unknown field 15 as padding when asked.

    grpcio_engine.py [keepalive_ms]    prints "READY <port>", then one line per event; exits at stdin EOF

Request ids:
    echo            one chunk [1 2 3]; prints "REQ echo <request hex>"
    many:N,PAD      N chunks [i], each padded by PAD bytes
    abort           grpc status RESOURCE_EXHAUSTED, "engine busy", after one chunk
    hang:ID         one chunk, then waits for an hour; prints "ENDED hang:ID" when the call ends
"""
import asyncio
import sys

import grpc


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if not n:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def read_varint(b, i):
    n = shift = 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return n, i


def length_delimited(num, payload):
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def chunk(ids, pad=0):
    msg = length_delimited(2, b"".join(varint(1 << 3) + varint(i) for i in ids))
    if pad:
        msg += length_delimited(15, b"x" * pad)
    return msg


def request_id(req):
    """GenerateRequest.request_id: field 1, a string."""
    i = 0
    while i < len(req):
        key, i = read_varint(req, i)
        num, typ = key >> 3, key & 7
        if typ == 0:
            _, i = read_varint(req, i)
        elif typ == 1:
            i += 8
        elif typ == 5:
            i += 4
        elif typ == 2:
            n, i = read_varint(req, i)
            if num == 1:
                return req[i : i + n].decode()
            i += n
        else:
            raise ValueError("wire type %d" % typ)
    return ""


async def generate(req, context):
    rid = request_id(req)
    kind, _, arg = rid.partition(":")
    if kind == "echo":
        print("REQ", rid, req.hex(), flush=True)
        yield chunk([1, 2, 3])
    elif kind == "many":
        n, pad = (int(x) for x in arg.split(","))
        for i in range(n):
            yield chunk([i], pad)
    elif kind == "abort":
        yield chunk([1])
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "engine busy")
    elif kind == "hang":
        # The handler never finishes on its own, so the RPC's end is the client's cancellation. The
        # RPC's end is watched rather than the handler: a cancellation can come while the handler is
        # parked at its yield, and then nothing is raised in it (nor is context.cancelled() set yet
        # when the callback runs).
        context.add_done_callback(lambda _: print("ENDED", rid, flush=True))
        yield chunk([1])
        await asyncio.sleep(3600)
    else:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown request id " + rid)


async def main():
    options = [
        ("grpc.max_send_message_length", 256 << 20),
        ("grpc.max_receive_message_length", 256 << 20),
    ]
    if len(sys.argv) > 1:  # ping idle connections, as an engine's keepalive would
        options += [
            ("grpc.keepalive_time_ms", int(sys.argv[1])),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
    server = grpc.aio.server(options=options)
    handler = grpc.method_handlers_generic_handler(
        "sglang.grpc.scheduler.SglangScheduler",
        {"Generate": grpc.unary_stream_rpc_method_handler(generate)},
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print("READY", port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop(0)


if __name__ == "__main__":
    asyncio.run(main())
