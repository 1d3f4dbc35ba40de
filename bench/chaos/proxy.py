"""A TCP forwarder in front of the local S3 server (moto keeps its state in memory, so the soak cannot
restart the server itself without emptying the lake): every S3 client of the stack (Spark's S3A, delta-rs
in the plan task) talks to the proxy's port. The soak's S3 fault kills this process with SIGKILL (every
open connection is reset), leaves the port closed (connections refused) and starts it again: what a client
sees when its S3 endpoint restarts or becomes unreachable.

    python -m bench.chaos.proxy LISTEN_PORT TARGET_PORT
"""

from __future__ import annotations

import asyncio
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def _serve(listen: int, target: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", listen, reuse_address=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1]), int(sys.argv[2])))
