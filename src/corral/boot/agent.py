"""`corral agent`: the node daemon, its settings checked before it registers."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence
from typing import Any

from corral.agent.agent import Agent
from corral.agent.capacity import ephemeral_ports
from corral.agent.identity import IdentityError
from corral.agent.images import ImageError, parse_option
from corral.agent.images import parse as parse_images
from corral.agent.settings import AgentSettings
from corral.boot.failure import BootFailure, from_env
from corral.domain.rendezvous import overlap, parse_port_range
from corral.logsetup import add_secret
from corral.waits import STOP_WAIT, exit_when_stuck


def agent(overrides: dict[str, Any], images: Sequence[str] = ()) -> None:
    """Until SIGTERM, SIGINT or SIGHUP: settings from CORRAL_AGENT_* variables, then the options
    given (None: not given); `images` (`--image NAME=JSON`) added to CORRAL_AGENT_IMAGES."""
    cfg = from_env(AgentSettings)
    try:
        cfg.images = {**cfg.images, **parse_option(list(images))}
    except ImageError as exc:
        raise BootFailure(str(exc), code=2) from None
    overrides = {**overrides, "token": overrides.get("token") or os.environ.get("CORRAL_AGENT_TOKEN")}
    for attr, value in overrides.items():
        if value is not None:
            setattr(cfg, attr, value)
    if not cfg.token:
        raise BootFailure("an agent needs CORRAL_AGENT_TOKEN (or --token)")
    if cfg.rendezvous_ports:
        _check_ports(cfg.rendezvous_ports, "--rendezvous-ports", "a gang's port")
    if overrides.get("serve_ports") or os.environ.get("CORRAL_AGENT_SERVE_PORTS"):
        _check_ports(cfg.serve_ports, "--serve-ports", "a replica's port")
    check_images(cfg)
    add_secret(cfg.token)
    try:
        asyncio.run(_run(Agent(cfg)))
    except IdentityError as exc:
        raise BootFailure(str(exc)) from None


def check_images(cfg: AgentSettings) -> None:
    """Its images' specs parse and name what is there, or it does not start (naming the image)."""
    try:
        parse_images(cfg.images)
    except ImageError as exc:
        raise BootFailure(str(exc), code=2) from None


def _check_ports(given: str, flag: str, what: str) -> None:
    try:
        ports = parse_port_range(given)
    except ValueError as exc:
        raise BootFailure(f"{flag}: {exc}") from None
    ephemeral = ephemeral_ports()
    if ephemeral is not None and overlap(ports, ephemeral):
        # Other programs (and the ports agents pick) come from there: a port of ours could be taken.
        raise BootFailure(
            f"{flag}: {given} overlaps this host's ephemeral ports"
            f" {ephemeral[0]}-{ephemeral[1]}; choose a range outside it ({what} could be taken)"
        )


async def _run(agent: Agent) -> None:
    loop = asyncio.get_running_loop()
    async with agent:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, agent.request_stop)
        await agent.run()
    await exit_when_stuck(STOP_WAIT)
