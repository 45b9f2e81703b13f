"""`corral user …` (admin) and `corral whoami`: users, their projects and their API keys."""

from typing import Annotated, Any

import typer

from corral.cli.admin import UNSET, PriorityRulesOpt, priority_rules
from corral.cli.connect import connect
from corral.cli.output import Format, OutputOpt, emit

app = typer.Typer(
    rich_markup_mode=None, help="Users, their projects and API keys (admin).", no_args_is_help=True
)
key_app = typer.Typer(
    rich_markup_mode=None, help="A user's API keys: create (shown once), list, revoke.", no_args_is_help=True
)
app.add_typer(key_app, name="key")

USER_COLUMNS = [
    ("NAME", "name"),
    ("ROLE", "role"),
    ("PROJECTS", "projects"),
    ("PRIORITY RULES", "priority_rules"),
    ("KERNELS RUN AS", "run_as.uid"),
    ("DEFAULT PROJECT", "default_project"),
    ("CREATED", "created_at"),
]
KEY_COLUMNS = [("ID", "id"), ("PREFIX", "prefix"), ("CREATED", "created_at")]
ProjectsOpt = Annotated[
    list[str] | None, typer.Option("--project", "-p", help="a project to belong to (repeat)")
]


@app.command("create")
def create(
    name: str,
    project: ProjectsOpt = None,
    admin: Annotated[bool, typer.Option("--admin", help="role admin (default: user)")] = False,
    output: Format = OutputOpt,
) -> None:
    """Create a user in the given projects; prints their first API key (shown this once)."""
    made = connect().users.create(name, "admin" if admin else "user", project or [])
    if output is Format.table:
        typer.echo(f"user {made.name} ({made.role}) in {', '.join(made.projects) or 'no project'}")
        typer.echo(f"API key (shown once, keep it secret): {made.key.key}")
    else:
        emit(made, output)


@app.command("list")
def list_users(output: Format = OutputOpt) -> None:
    """Every user."""
    emit(connect().raw.users.list(), output, USER_COLUMNS)


@app.command("get")
def get(name: str, output: Format = OutputOpt) -> None:
    """One user and their projects."""
    emit(connect().raw.users.get(name), output, USER_COLUMNS)


@app.command("update")
def update(
    name: str,
    project: Annotated[
        list[str] | None, typer.Option("--project", "-p", help="replaces the memberships (repeat)")
    ] = None,
    no_projects: Annotated[bool, typer.Option("--no-projects", help="remove every membership")] = False,
    role: Annotated[str | None, typer.Option(help="admin or user")] = None,
    priority: PriorityRulesOpt = None,
    uid: Annotated[
        int | None, typer.Option(help="uid their kernels run as on agents started as root")
    ] = None,
    gid: Annotated[int | None, typer.Option(help="with --uid: their group (default: the uid's)")] = None,
    no_uid: Annotated[
        bool, typer.Option("--no-uid", help="their kernels run as agents' default account")
    ] = False,
    default_project: Annotated[
        str | None,
        typer.Option(help="where their sessions go when they name no project ('' clears)"),
    ] = None,
    output: Format = OutputOpt,
) -> None:
    """Change a user's role, projects, priority rules (theirs override their projects') or the uid
    their kernels run as."""
    body: dict[str, Any] = {}
    if uid is not None:
        body["run_as"] = {"uid": uid, **({"gid": gid} if gid is not None else {})}
    elif no_uid:
        body["run_as"] = None
    if (rules := priority_rules(priority)) is not UNSET:
        body["priority_rules"] = rules
    if project or no_projects:
        body["projects"] = project or []
    if role is not None:
        body["role"] = role
    if default_project is not None:
        body["default_project"] = default_project or None
    emit(connect().raw.users.update(name, **body), output, USER_COLUMNS)


@key_app.command("create")
def key_create(name: str, output: Format = OutputOpt) -> None:
    """A new API key for the user (shown this once)."""
    made = connect().users.create_key(name)
    if output is Format.table:
        typer.echo(f"API key {made.id} (shown once, keep it secret): {made.key}")
    else:
        emit(made, output)


@key_app.command("list")
def key_list(name: str, output: Format = OutputOpt) -> None:
    """The user's keys (their first characters only)."""
    emit(connect().raw.users.keys(name), output, KEY_COLUMNS)


@key_app.command("revoke")
def key_revoke(name: str, key_id: str) -> None:
    """Revoke a key: refused from its next request, on every manager."""
    connect().users.revoke_key(name, key_id)
    typer.echo(f"key {key_id} revoked")


def whoami(output: Format = OutputOpt) -> None:
    """Who this CLI's key belongs to, their projects, and the priorities they may ask for there."""
    me = connect().me()
    if output is not Format.table:
        emit(me, output)
        return
    emit(me, output, [("NAME", "name"), ("ROLE", "role"), ("PROJECTS", "projects")])
    rows = [{"project": name, **rules} for name, rules in sorted(me.priority.items())]
    for r in rows:
        r["range"] = f"{r.get('min')}..{r.get('max')}" if r.get("may_change", True) else "fixed"
    typer.echo("")
    emit(rows, output, [("PROJECT", "project"), ("DEFAULT PRIORITY", "default"), ("MAY ASK FOR", "range")])
