"""The proxy's connections to replicas against a real local HTTP/1.1 server: kept alive and
reused, a stale kept one replaced without an error, bodies streamed both ways (chunked too),
repeated headers kept, a refused connection told apart from a broken exchange."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.http1 import Broken, Refused, Upstream


class Server:
    """Answers each request with `answer` (bytes, or a function of the request's body); counts
    connections; `close_after` closes each connection after that many answers."""

    def __init__(self, answer: bytes, close_after: int = 0) -> None:
        self.answer = answer
        self.close_after = close_after
        self.connections = 0
        self.bodies: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while await reader.readline():
                headers = {}
                while (h := await reader.readline()) not in (b"\r\n", b""):
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = b""
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                elif headers.get("transfer-encoding") == "chunked":
                    while (size := int((await reader.readline()).strip(), 16)) > 0:
                        body += await reader.readexactly(size)
                        await reader.readline()
                    await reader.readline()
                self.bodies.append(body)
                writer.write(self.answer)
                await writer.drain()
                served += 1
                if self.close_after and served >= self.close_after:
                    break
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\nok"
CHUNKED = b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"


async def _get(
    up: Upstream, address: str, body: AsyncIterator[bytes] | None = None, **kw: str
) -> tuple[int, bytes, list]:
    headers = [("Host", address), *kw.items()]
    resp = await up.send(address, "POST" if body else "GET", "/x", headers, body)
    data = b"".join([c async for c in resp.body()])
    return resp.status, data, resp.headers


async def test_a_connection_is_kept_and_reused() -> None:
    up, server = Upstream(), Server(OK)
    async with server as address:
        for _ in range(3):
            status, data, headers = await _get(up, address)
            assert (status, data) == (200, b"ok")
        assert server.connections == 1
        assert [v for k, v in headers if k == b"set-cookie"] == [b"a=1", b"b=2"]
    await up.aclose()


async def test_a_kept_connection_the_replica_closed_is_replaced_without_an_error() -> None:
    up, server = Upstream(), Server(OK, close_after=1)
    async with server as address:
        for _ in range(3):
            assert (await _get(up, address))[:2] == (200, b"ok")
            await asyncio.sleep(0.05)  # the server's close reaches us first
        assert server.connections == 3
    await up.aclose()


async def test_bodies_stream_both_ways_chunked_too() -> None:
    async def parts() -> AsyncIterator[bytes]:
        for p in (b"", b"hello ", b"world"):
            yield p

    up, server = Upstream(), Server(CHUNKED)
    async with server as address:
        status, data, _ = await _get(up, address, parts(), **{"Transfer-Encoding": "chunked"})
        assert (status, data) == (201, b"abcde") and server.bodies == [b"hello world"]
        status, data, _ = await _get(up, address)  # the de-chunked answer left it reusable
        assert status == 201 and server.connections == 1
    await up.aclose()


async def test_refused_is_told_from_broken() -> None:
    up = Upstream()
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(Refused):
        await up.send(f"127.0.0.1:{port}", "GET", "/", [("Host", "x")], None)
    rude = Server(b"not http at all\r\n\r\n")
    async with rude as address:
        with pytest.raises(Broken):
            await up.send(address, "GET", "/", [("Host", address)], None)
    await up.aclose()


async def test_tls_is_spoken_and_its_certificate_verified(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    await asyncio.to_thread(
        subprocess.run,
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    hello = Server(OK)
    server = await asyncio.start_server(hello.handle, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    up = Upstream()
    try:
        with pytest.raises(Refused, match="CERTIFICATE_VERIFY_FAILED"):  # self-signed: not trusted
            await up.send(
                f"localhost:{port}",
                "GET",
                "/",
                [("Host", "localhost")],
                None,
                ("127.0.0.1", port),
                "localhost",
            )
    finally:
        server.close()
        await up.aclose()
