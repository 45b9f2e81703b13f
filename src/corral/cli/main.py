"""The `corral` command."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from corral.cli import admin, arrays, groups, session, users
from corral.cli.client import Api, fail, from_env, load_saved, save_config
from corral.cli.output import Format, OutputOpt, binary_size, emit
from corral.cli.run import run

app = typer.Typer(
    name="corral",
    help="Corral: a batch-session scheduler that handles failure natively.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        typer.echo(f"corral {version('corral')}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="print Corral's version and exit"),
    ] = False,
) -> None:
    """Corral: a batch-session scheduler that handles failure natively."""


app.command(context_settings={"allow_interspersed_args": False})(run)
app.add_typer(session.app, name="session")
app.add_typer(arrays.app, name="array")
app.add_typer(admin.policy_app, name="policy")
app.add_typer(admin.config_app, name="config")
app.add_typer(admin.project_app, name="project")
app.add_typer(admin.audit_app, name="audit")
app.add_typer(users.app, name="user")
app.add_typer(groups.app, name="rg")
app.command("whoami")(users.whoami)
app.command("events")(admin.events)

db = typer.Typer(help="Database maintenance.", no_args_is_help=True)
app.add_typer(db, name="db")
agent_app = typer.Typer(
    help="Run an agent (`CORRAL_AGENT_TOKEN=T corral agent --manager URL`) or list agents."
)
app.add_typer(agent_app, name="agent")

DatabaseOpt = Annotated[
    str | None, typer.Option("--database-url", help="sqlite+aiosqlite:///PATH or postgresql+asyncpg://...")
]


@app.command()
def up(
    agents: Annotated[int, typer.Option(help="local agents to start")] = 2,
    port: Annotated[int, typer.Option(help="port to listen on")] = 8470,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    rotate_key: Annotated[
        bool, typer.Option("--rotate-key", help="mint a new admin key and revoke the old ones")
    ] = False,
) -> None:
    """Start Corral on its embedded default: a manager on SQLite plus local agents.

    Stops cleanly (agents, their kernels, then the manager; exit 0) on SIGTERM, SIGINT or SIGHUP.
    Its files (database, keys, kernel logs) are readable by their owner only.
    """
    from corral.agent.identity import IdentityError, KernelIdentity, ensure_account
    from corral.agent.settings import AgentSettings
    from corral.cli.serve import agent_token_file, kernel_tree, private_dir, serve_embedded
    from corral.logsetup import add_secret
    from corral.settings import ManagerSettings, SchedulerSettings, data_dir
    from corral.store.auth import new_key

    os.umask(0o077)
    # Read first: a bad setting stops `up` before it makes an account, a key or a directory (its
    # agents read theirs from the same environment).
    settings, scheduler = from_env(ManagerSettings, host=host, port=port), from_env(SchedulerSettings)
    agent_cfg = from_env(AgentSettings)
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
        raise fail(str(exc)) from None
    if created:
        typer.echo(f"corral: {created}", err=True)
    kernels = kernel_tree(data)
    settings.agent_token, settings.bootstrap_admin_key, settings.rotate_admin_key = token, key, rotate_key
    # Every local agent sees the same checkpoint directory per retry chain.
    settings.checkpoint_root = str(kernels / "checkpoints")
    if kernels != data:
        typer.echo(f"kernels run as {identity.info()['kernel_user']}; their files are in {kernels}", err=True)
    cfg = save_config(url, key)
    typer.echo(f"Corral is starting at {url} with {agents} local agent(s); data in {data}", err=True)
    if key == saved_key:
        # Shown in full only when minted: a restart's output (often a service log) never holds it.
        typer.echo(f"admin API key: {key[:8]}... as before (in {cfg}; --rotate-key for a new one)", err=True)
    else:
        what = "new admin API key (older ones revoked)" if rotate_key else "admin API key"
        typer.echo(f"{what}: {key}  (saved for the CLI in {cfg})", err=True)
    typer.echo(f"From another shell:  {_this_command()} run -- python3 -c 'print(42)'", err=True)
    from corral.services.cluster import StartupError

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve_embedded(settings, scheduler, agents, kernels))
    except StartupError as exc:
        raise fail(str(exc)) from None


def _this_command() -> str:
    """How to run this very Corral from another shell: `corral` if that is what PATH finds, else the
    script's full path, else this interpreter with -m (however Corral was installed)."""
    import shlex
    import shutil

    script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "corral" and script.is_file():
        found = shutil.which("corral")
        return "corral" if found and Path(found).resolve() == script else shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m corral"


@app.command()
def manager(
    database_url: DatabaseOpt = None,
    host: Annotated[str | None, typer.Option(help="address to listen on")] = None,
    port: Annotated[int | None, typer.Option(help="port to listen on")] = None,
) -> None:
    """Run a manager (API + scheduling loops); settings from CORRAL_* variables."""
    from corral.cli.serve import serve_manager
    from corral.services.cluster import StartupError
    from corral.settings import ManagerSettings, SchedulerSettings

    settings, scheduler = from_env(ManagerSettings), from_env(SchedulerSettings)
    for attr, value in (("database_url", database_url), ("host", host), ("port", port)):
        if value is not None:
            setattr(settings, attr, value)
    if not settings.agent_token:
        raise fail("set CORRAL_AGENT_TOKEN: agents must present it to register")
    from corral.logsetup import add_secret

    os.umask(0o077)
    add_secret(settings.agent_token, settings.bootstrap_admin_key)
    try:
        serve_manager(settings, scheduler)
    except StartupError as exc:
        raise fail(str(exc)) from None


@agent_app.callback(invoke_without_command=True)
def agent(
    ctx: typer.Context,
    manager: Annotated[str | None, typer.Option("--manager", help="manager URL")] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="agent token; prefer CORRAL_AGENT_TOKEN, as a command line is visible to every user in ps",
        ),
    ] = None,
    agent_id: Annotated[str | None, typer.Option("--id", help="agent id (default: hostname)")] = None,
    resource_group: Annotated[str | None, typer.Option(help="resource group to join")] = None,
    cpu: Annotated[float | None, typer.Option(help="CPU cores to declare (default: detected)")] = None,
    mem: Annotated[str | None, typer.Option(help="memory to declare, e.g. 8G (default: detected)")] = None,
    gpu: Annotated[int | None, typer.Option(help="GPUs to declare (default: NVML)")] = None,
    address: Annotated[str | None, typer.Option(help="address peers use to reach this node")] = None,
    work_dir: Annotated[Path | None, typer.Option(help="where kernel files go")] = None,
    memory_mode: Annotated[str | None, typer.Option(help="auto, cgroup2, cgroup1 or watchdog")] = None,
    kernel_user: Annotated[
        str | None,
        typer.Option(help="when started as root: the account kernels run as unless their owner has a uid"),
    ] = None,
    allow_root_kernels: Annotated[
        bool, typer.Option("--allow-root-kernels", help="when started as root: kernels may run as root")
    ] = False,
    rendezvous_ports: Annotated[
        str | None,
        typer.Option(
            help="ports LOW-HIGH the manager may give a gang's rank 0 here (e.g. 29400-29499): a gang"
            " spread over agents then starts as soon as it is prepared, with no start order to wait for"
        ),
    ] = None,
) -> None:
    """Run an agent on this node: it registers, pulls work and runs kernels.

    Started as root, it never runs a kernel as root unless told to: each kernel runs as its owner's
    mapped uid (`corral user update NAME --uid N`) or as --kernel-user (default `corral`).
    """
    if ctx.invoked_subcommand is not None:
        return
    from corral.agent.agent import Agent
    from corral.agent.settings import AgentSettings

    cfg = from_env(AgentSettings)
    overrides = {
        "manager": manager,
        "token": token or os.environ.get("CORRAL_AGENT_TOKEN"),
        "id": agent_id,
        "resource_group": resource_group,
        "cpu": cpu,
        "mem": mem,
        "gpu": gpu,
        "address": address,
        "work_dir": work_dir,
        "memory_mode": memory_mode,
        "kernel_user": kernel_user,
        "allow_root_kernels": allow_root_kernels or None,
        "rendezvous_ports": rendezvous_ports,
    }
    for attr, value in overrides.items():
        if value is not None:
            setattr(cfg, attr, value)
    if not cfg.token:
        raise fail("an agent needs CORRAL_AGENT_TOKEN (or --token)")
    if cfg.rendezvous_ports:
        from corral.agent.capacity import ephemeral_ports
        from corral.domain.rendezvous import overlap, parse_port_range

        try:
            ports = parse_port_range(cfg.rendezvous_ports)
        except ValueError as exc:
            raise fail(f"--rendezvous-ports: {exc}") from None
        ephemeral = ephemeral_ports()
        if ephemeral is not None and overlap(ports, ephemeral):
            # Other programs (and the ports agents pick) come from there: a gang's port could be taken.
            raise fail(
                f"--rendezvous-ports: {cfg.rendezvous_ports} overlaps this host's ephemeral ports"
                f" {ephemeral[0]}-{ephemeral[1]}; choose a range outside it"
            )
    from corral.logsetup import add_secret

    add_secret(cfg.token)
    from corral.agent.identity import IdentityError

    try:
        asyncio.run(_run_agent(Agent(cfg)))
    except IdentityError as exc:
        raise fail(str(exc)) from None


async def _run_agent(agent: object) -> None:
    import signal

    from corral.agent.agent import Agent
    from corral.waits import STOP_WAIT, exit_when_stuck

    assert isinstance(agent, Agent)
    loop = asyncio.get_running_loop()
    async with agent:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, agent.request_stop)
        await agent.run()
    await exit_when_stuck(STOP_WAIT)


@agent_app.command("list")
def agent_list(output: Format = OutputOpt) -> None:
    """List agents with their capacity, usage and liveness (admin)."""
    rows = Api().call("GET", "/agents")
    if output is Format.table:  # bytes stay bytes in -o json and -o yaml
        for r in rows:
            r["mem_shown"] = {k: binary_size(r[k].get("mem")) for k in ("capacity", "used") if r.get(k)}
            info = r.get("info") or {}
            # What placement reads (agent/health.py): a missing flag is schedulable.
            r["placeable"] = (
                "yes" if info.get("schedulable", True) else f"no: {info.get('unschedulable_reason')}"
            )
    emit(
        rows,
        output,
        [
            ("ID", "id"),
            ("STATUS", "status"),
            ("SCHEDULABLE", "placeable"),
            ("GROUP", "resource_group"),
            ("EPOCH", "epoch"),
            ("CPU", "capacity.cpu"),
            ("USED CPU", "used.cpu"),
            ("MEM", "mem_shown.capacity"),
            ("USED MEM", "mem_shown.used"),
            ("GPU", "capacity.gpu"),
            ("MEMORY LIMITS", "info.memory_mode"),
            ("CPU LIMITS", "info.cpu_mode"),
            ("KERNELS RUN AS", "info.kernel_user"),
            ("HEARTBEAT", "last_heartbeat"),
        ],
    )


@db.command()
def upgrade(database_url: DatabaseOpt = None) -> None:
    """Apply database migrations (idempotent)."""
    from corral.settings import ManagerSettings
    from corral.store.db import make_engine
    from corral.store.db import upgrade as do_upgrade

    url = database_url or from_env(ManagerSettings).resolved_database_url()

    async def go() -> None:
        engine = make_engine(url)
        try:
            await do_upgrade(engine)
        finally:
            await engine.dispose()

    asyncio.run(go())
    typer.echo("database is up to date", err=True)


def main() -> None:
    from corral.logsetup import configure

    configure()
    app(prog_name="corral")


if __name__ == "__main__":
    main()
