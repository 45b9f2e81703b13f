"""The `corral` command."""

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from corral.cli import admin, arrays, deploy, events, groups, session, users, webhooks
from corral.cli.connect import connect, refused
from corral.cli.output import Format, OutputOpt, binary_size, emit
from corral.cli.run import run

app = typer.Typer(
    rich_markup_mode=None,
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
app.add_typer(webhooks.app, name="webhook")
app.add_typer(deploy.app, name="deploy")
app.command("whoami")(users.whoami)
app.command("events")(events.events)

db = typer.Typer(rich_markup_mode=None, help="Database maintenance.", no_args_is_help=True)
app.add_typer(db, name="db")
agent_app = typer.Typer(
    rich_markup_mode=None,
    help="Run an agent (`CORRAL_AGENT_TOKEN=T corral agent --manager URL`) or list agents.",
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
    from corral.boot.up import up as start

    with _booting():
        start(agents, port, host, rotate_key)


@contextlib.contextmanager
def _booting() -> Iterator[None]:
    """A process boot/ starts logs as the servers do (secrets redacted); one it refuses to start
    prints its lines on stderr and exits with its status, no traceback."""
    from corral.boot.failure import BootFailure
    from corral.logsetup import configure

    configure()

    try:
        yield
    except BootFailure as exc:
        for line in exc.lines:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(exc.code) from None


@app.command()
def manager(
    database_url: DatabaseOpt = None,
    host: Annotated[str | None, typer.Option(help="address to listen on")] = None,
    port: Annotated[int | None, typer.Option(help="port to listen on")] = None,
) -> None:
    """Run a manager (API + scheduling loops); settings from CORRAL_* variables."""
    from corral.boot.manager import manager as start

    with _booting():
        start(database_url, host, port)


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
    serve_ports: Annotated[
        str | None,
        typer.Option(
            help="ports LOW-HIGH given to deployment replicas here as $CORRAL_PORT (default 30000-32767)"
        ),
    ] = None,
    image: Annotated[
        list[str] | None,
        typer.Option(
            "--image",
            help='NAME=JSON, repeatable: an environment sessions may name, e.g. py311=\'{"python":'
            ' "/usr/bin/python3.11"}\', or {"venv": DIR}, {"path": DIR}, {"requirements": [...]}'
            " (added to CORRAL_AGENT_IMAGES)",
        ),
    ] = None,
) -> None:
    """Run an agent on this node: it registers, pulls work and runs kernels.

    Started as root, it never runs a kernel as root unless told to: each kernel runs as its owner's
    mapped uid (`corral user update NAME --uid N`) or as --kernel-user (default `corral`).
    """
    if ctx.invoked_subcommand is not None:
        return
    from corral.boot.agent import agent as start

    overrides = {
        "manager": manager,
        "token": token,
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
        "serve_ports": serve_ports,
    }
    with _booting():
        start(overrides, image or [])


@agent_app.command("list")
def agent_list(output: Format = OutputOpt) -> None:
    """List agents with their capacity, usage and liveness (admin)."""
    rows = connect().raw.agents.list()
    if output is Format.table:  # bytes stay bytes in -o json and -o yaml
        for r in rows:
            r["mem_shown"] = {k: binary_size(r[k].get("mem")) for k in ("capacity", "used") if r.get(k)}
            info = r.get("info") or {}
            # What placement reads (agent/health.py): a missing flag is schedulable.
            r["placeable"] = (
                "yes" if info.get("schedulable", True) else f"no: {info.get('unschedulable_reason')}"
            )
            r["images_shown"] = images_shown(info.get("images") or {})
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
            ("IMAGES", "images_shown"),
            ("HEARTBEAT", "last_heartbeat"),
        ],
    )


def images_shown(images: dict[str, Any]) -> str:
    """`name`, or `name (not built)` for a requirements list still to build."""
    return ", ".join(
        f"{name}{'' if i.get('ready') else ' (not built)'}" for name, i in sorted(images.items())
    )


@agent_app.command("images")
def agent_images(output: Format = OutputOpt) -> None:
    """Every agent's images: their kind, and whether each is ready (a requirements list: built)."""
    rows = [
        {"agent": a["id"], "status": a["status"], "image": name, **offer}
        for a in connect().raw.agents.list()
        for name, offer in sorted(((a.get("info") or {}).get("images") or {}).items())
    ]
    emit(
        rows,
        output,
        [("AGENT", "agent"), ("STATUS", "status"), ("IMAGE", "image"), ("KIND", "kind"), ("READY", "ready")],
    )


@db.command()
def upgrade(database_url: DatabaseOpt = None) -> None:
    """Apply database migrations (idempotent)."""
    from corral.boot.manager import upgrade as start

    with _booting():
        start(database_url)
    typer.echo("database is up to date", err=True)


def main() -> None:
    from corral.client.errors import CorralError

    try:
        app(prog_name="corral")
    except CorralError as exc:
        raise SystemExit(refused(exc)) from None


if __name__ == "__main__":
    main()
