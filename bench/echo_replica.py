"""A fast replica for bench/serve.py: a keep-alive HTTP/1.1 server on $CORRAL_PORT in plain asyncio
(stdlib only: kernels may run as an account that cannot read this checkout's packages).  Every
path answers "ok" but /pid (its session id and process id); a request body is read and dropped."""

import asyncio
import os

SESSION = os.environ.get("CORRAL_SESSION_ID", "?")


def _answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


OK = _answer(b"ok")
PID = _answer(f"{SESSION} {os.getpid()}".encode())


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while line := await reader.readline():
            length = 0
            while (header := await reader.readline()) not in (b"\r\n", b""):
                if header[:15].lower() == b"content-length:":
                    length = int(header[15:])
            if length:
                await reader.readexactly(length)
            writer.write(PID if line.split(b" ")[1:2] == [b"/pid"] else OK)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(serve, "0.0.0.0", int(os.environ["CORRAL_PORT"]))
    async with server:
        await server.serve_forever()


asyncio.run(main())
