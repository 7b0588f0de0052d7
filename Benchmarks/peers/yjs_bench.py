#!/usr/bin/env python3
"""The replication workload of shoal-bench, through Yjs over websockets (pycrdt-websocket).

Client A writes N map keys (each a 5-field object) in transactions of 100 to a room of a
pycrdt-websocket server on 127.0.0.1 (a port the kernel chooses); client B is connected to
the same room. It times, from A's first write, until the server's copy of the room holds
every key (one hop) and until B's does (two hops: A -> server -> B), and prints one JSON
object. Install: pip install -r Benchmarks/peers/requirements.txt
"""
import argparse
import asyncio
import json
import sys
import time

from pycrdt import Doc, Map, Provider
from pycrdt.websocket import WebsocketServer
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve


class Channel:
    """A websockets connection as the channel pycrdt's Provider and WebsocketServer expect."""

    def __init__(self, websocket, path):
        self._websocket = websocket
        self._path = path

    @property
    def path(self):
        return self._path

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            return await self.recv()
        except Exception:
            raise StopAsyncIteration()

    async def send(self, message):
        await self._websocket.send(message)

    async def recv(self):
        return bytes(await self._websocket.recv())


async def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the documents did not arrive in time")
        await asyncio.sleep(0.002)
    return time.monotonic()


async def run(updates, per_transaction, timeout):
    room = "bench"
    async with WebsocketServer() as websocket_server:
        async def handler(websocket):
            await websocket_server.serve(Channel(websocket, websocket.request.path.lstrip("/")))

        async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
            port = server.sockets[0].getsockname()[1]
            url = f"ws://127.0.0.1:{port}/{room}"
            doc_a, doc_b = Doc(), Doc()
            docs_a = doc_a.get("docs", type=Map)
            docs_b = doc_b.get("docs", type=Map)
            async with connect(url, max_size=None) as ws_a, connect(url, max_size=None) as ws_b:
                async with Provider(doc_a, Channel(ws_a, room)), Provider(doc_b, Channel(ws_b, room)):
                    await wait_for(lambda: room in websocket_server.rooms, timeout)
                    docs_server = websocket_server.rooms[room].ydoc.get("docs", type=Map)
                    start = time.monotonic()
                    for first in range(0, updates, per_transaction):
                        with doc_a.transaction():
                            for n in range(first, min(first + per_transaction, updates)):
                                docs_a[f"d{n}"] = {"title": f"document {n}", "n": n, "color": "blue", "size": n % 7, "ok": True}
                        await asyncio.sleep(0)
                    written = time.monotonic()
                    one_hop = await wait_for(lambda: len(docs_server) >= updates, timeout)
                    two_hops = await wait_for(lambda: len(docs_b) >= updates, timeout)
    return {
        "tool": "pycrdt-websocket",
        "updates": updates,
        "perTransaction": per_transaction,
        "writeSeconds": written - start,
        "oneHopSeconds": one_hop - start,
        "twoHopSeconds": two_hops - start,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=100_000)
    parser.add_argument("--per-transaction", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    result = asyncio.run(run(args.updates, args.per_transaction, args.timeout))
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
