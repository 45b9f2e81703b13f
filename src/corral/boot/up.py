"""`corral up`: a manager on SQLite and local agents beside it, with zero configuration."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import sys
from pathlib import Path

from corral.agent.identity import IdentityError, KernelIdentity, ensure_account
from corral.agent.settings import AgentSettings
from corral.boot.agent import check_images
from corral.boot.failure import BootFailure, from_env
from corral.boot.serve import agent_token_file, kernel_tree, private_dir, serve_embedded
from corral.logsetup import add_secret
from corral.saved_config import load_saved, save_config
from corral.services.cluster import StartupError
from corral.settings import ManagerSettings, SchedulerSettings, data_dir
from corral.store.auth import new_key


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def up(agents: int, port: int, host: str, rotate_key: bool) -> None:
    """Until SIGTERM, SIGINT or SIGHUP; its files are readable by their owner only."""
    os.umask(0o077)
    # Read first: a bad setting stops `up` before it makes an account, a key or a directory (its
    # agents read theirs from the same environment).
    settings, scheduler = from_env(ManagerSettings, host=host, port=port), from_env(SchedulerSettings)
    agent_cfg = from_env(AgentSettings)
    check_images(agent_cfg)  # its agents are given CORRAL_AGENT_IMAGES as they are
    data = private_dir(data_dir())
    url = f"http://{host}:{port}"
    saved_url, saved_key = load_saved()
    key = saved_key if saved_key and saved_url == url and not rotate_key else new_key()
    token = agent_token_file(data)
    add_secret(key, token)
    try:
        created = ensure_account()
        # What the agents will enforce, resolved as they resolve it: the banner never guesses.
        identity = KernelIdentity.resolve(agent_cfg.kernel_user, agent_cfg.allow_root_kernels)
    except IdentityError as exc:
        raise BootFailure(str(exc)) from None
    if created:
        say(f"corral: {created}")
    kernels = kernel_tree(data)
    settings.agent_token, settings.bootstrap_admin_key, settings.rotate_admin_key = token, key, rotate_key
    # Every local agent sees the same checkpoint directory per retry chain.
    settings.checkpoint_root = str(kernels / "checkpoints")
    if kernels != data:
        say(f"kernels run as {identity.info()['kernel_user']}; their files are in {kernels}")
    cfg = save_config(url, key)
    say(f"Corral is starting at {url} with {agents} local agent(s); data in {data}")
    if key == saved_key:
        # Shown in full only when minted: a restart's output (often a service log) never holds it.
        say(f"admin API key: {key[:8]}... as before (in {cfg}; --rotate-key for a new one)")
    else:
        what = "new admin API key (older ones revoked)" if rotate_key else "admin API key"
        say(f"{what}: {key}  (saved for the CLI in {cfg})")
    say(f"From another shell:  {this_command()} run -- python3 -c 'print(42)'")
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve_embedded(settings, scheduler, agents, kernels))
    except StartupError as exc:
        raise BootFailure(str(exc)) from None


def this_command() -> str:
    """How to run this very Corral from another shell: `corral` if that is what PATH finds, else the
    script's full path, else this interpreter with -m (however Corral was installed)."""
    script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "corral" and script.is_file():
        found = shutil.which("corral")
        return "corral" if found and Path(found).resolve() == script else shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m corral"
