"""A TCP proxy on loopback that delays every byte by a fixed time each way: a lab host made
to look as far away as a rented one (this machine's kernel has no netem).

Each direction queues what it reads with the time it arrived and writes it once the delay
has passed, so order and throughput are kept and only latency is added.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            arrived, data = await queue.get()
            wait = arrived + delay_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(1 << 16):
            queue.put_nowait((time.monotonic(), data))
    except ConnectionError:
        pass
    queue.put_nowait((time.monotonic(), b""))
    await sender


async def _start(target: tuple[str, int], delay_s: float) -> asyncio.Server:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            host_r, host_w = await asyncio.open_connection(*target)
        except OSError:
            client_w.close()
            return
        try:
            await asyncio.gather(_pump(client_r, host_w, delay_s),
                                 _pump(host_r, client_w, delay_s))  # fmt: skip
        except (asyncio.CancelledError, ConnectionError):
            pass  # the proxy is stopping, or a side hung up: end quietly
        finally:
            client_w.close()
            host_w.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _stop(server: asyncio.Server) -> None:
    server.close()
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@contextmanager
def delay_proxy(address: str, port: int, one_way_ms: float) -> Iterator[int]:
    """The local port that reaches `address:port` `one_way_ms` later each way."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(_start((address, port), one_way_ms / 1000), loop)
    try:
        yield server.result(10).sockets[0].getsockname()[1]
    finally:
        asyncio.run_coroutine_threadsafe(_stop(server.result()), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
