"""A minimal HTTP/1.1 client for tests of the components' own HTTP servers (metrics, probes, pprof)."""

from __future__ import annotations

import asyncio


async def http_get(port: int, target: str, method: str = "GET") -> tuple[int, dict[str, str], str]:
    """Status, headers and body of one request to ``127.0.0.1:port``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {target} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = raw.decode().partition("\r\n\r\n")
    status_line, *header_lines = head.split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), headers, body
