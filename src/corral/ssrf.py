"""The SSRF guard of webhooks: a target whose host resolves to a loopback, link-local or private
address is refused, at creation and again at each delivery (its name may resolve elsewhere since),
unless the cluster allows private targets (`webhooks.allow_private`)."""

from __future__ import annotations

import asyncio
import socket

from corral.domain.webhooks import BadTarget, Target, private, target


async def _resolved(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


async def refusal(url: str, allow_private: bool) -> str | None:
    """Why this URL may not be delivered to now (None: it may)."""
    checked = await resolved(url, allow_private)
    return checked if isinstance(checked, str) else None


async def resolved(url: str, allow_private: bool) -> tuple[Target, str] | str:
    """Where to deliver: the target and the address to connect to, checked (the sender connects
    to that very address, so a name that resolves elsewhere at the connection cannot slip a
    private address past the check); or why not.  With private targets allowed, the address is
    the host itself (resolved by the connection)."""
    try:
        where = target(url)
    except BadTarget as exc:
        return f"refused: the url {exc}"
    if allow_private:
        return where, where.host
    try:
        addresses = await _resolved(where.host, where.port)
    except OSError as exc:
        return f"{where.host} does not resolve: {exc.strerror or exc}"[:300]
    inside = [a for a in addresses if private(a)]
    if inside:
        return (
            f"refused: {where.host} resolves to the private address {inside[0]}"
            " (allow with `corral config set webhooks.allow_private true`)"
        )
    if not addresses:
        return f"{where.host} resolves to no address"
    return where, addresses[0]
