"""`corral policy|config|project|events|audit`: retry configuration and what happened."""

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from corral.cli.connect import connect, fail
from corral.cli.output import Format, OutputOpt, emit

if TYPE_CHECKING:
    pass

policy_app = typer.Typer(
    rich_markup_mode=None,
    help="Named retry policies (admin): apply YAML, get, list, delete.",
    no_args_is_help=True,
)
config_app = typer.Typer(
    rich_markup_mode=None,
    help="Cluster settings (admin), e.g. `corral config set retry.enabled false`.",
    no_args_is_help=True,
)
project_app = typer.Typer(
    rich_markup_mode=None, help="Projects and their retry defaults (admin).", no_args_is_help=True
)
audit_app = typer.Typer(
    rich_markup_mode=None, help="The audit log (admin): retries and admin changes.", no_args_is_help=True
)


@policy_app.command("apply")
def policy_apply(
    file: Annotated[Path, typer.Option("-f", "--file", help="policy YAML (kind: RetryPolicy); - for stdin")],
    output: Format = OutputOpt,
) -> None:
    """Create or replace the policies in FILE (several documents may be separated by ---)."""
    import yaml

    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text()
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise fail(f"cannot read {file}: {exc}", 2) from None
    if not docs:
        raise fail(f"{file} holds no policy", 2)
    api = connect()
    for doc in docs:
        if not isinstance(doc, dict):
            raise fail(f"{file}: a policy is a mapping (kind: RetryPolicy), not {type(doc).__name__}", 2)
        found = api.policies.apply(doc)
        if output is Format.table:
            typer.echo(f"retry policy {found.metadata['name']} applied")
        else:
            emit(found, output)


@policy_app.command("get")
def policy_get(
    name: str,
    output: Annotated[Format, typer.Option("-o", "--output", help="table, json or yaml")] = Format.yaml,
) -> None:
    """Show a policy (YAML by default, ready for `apply -f`)."""
    emit(connect().raw.policies.get(name), output, [("NAME", "metadata.name"), ("SPEC", "spec")])


@policy_app.command("list")
def policy_list(output: Format = OutputOpt) -> None:
    """Every named policy."""
    rows = connect().policies.list()
    table = [
        {
            "name": p.metadata["name"],
            "rules": len(p.spec.get("rules") or []),
            "retry_limit": p.spec.get("retry_limit"),
            "default_action": p.spec.get("default_action"),
            "updated": p.metadata.get("updated_at"),
        }
        for p in rows
    ]
    emit(
        rows if output is not Format.table else table,
        output,
        [
            ("NAME", "name"),
            ("RULES", "rules"),
            ("LIMIT", "retry_limit"),
            ("DEFAULT", "default_action"),
            ("UPDATED", "updated"),
        ],
    )


@policy_app.command("delete")
def policy_delete(name: str) -> None:
    """Delete a policy (refused while a project binds it)."""
    connect().policies.delete(name)
    typer.echo(f"retry policy {name} deleted")


def _value(raw: str) -> Any:
    """A setting's value: JSON when it parses (true, 5, null, {...}), else the string."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


@config_app.command("get")
def config_get(
    key: Annotated[str | None, typer.Argument(help="e.g. retry.enabled; all when omitted")] = None,
    output: Annotated[Format, typer.Option("-o", "--output", help="table, json or yaml")] = Format.yaml,
) -> None:
    """Show the cluster settings (or one of them)."""
    data: Any = connect().raw.cluster.config()
    for part in key.split(".") if key else []:
        if not isinstance(data, dict) or part not in data:
            raise fail(f"no setting {key!r} (try `corral config get`)", 2)
        data = data[part]
    if isinstance(data, dict | list):
        emit(data, Format.json if output is Format.table else output)
    else:
        typer.echo(json.dumps(data))


@config_app.command("set")
def config_set(
    key: Annotated[
        str,
        typer.Argument(
            help="retry.enabled, retry.global_max_retries, retry.dispatch_rate, retry.defaults,"
            " retry.default_policy, retry.default_backoff,"
            " failure_categories, webhooks.allow_private"
        ),
    ],
    value: Annotated[str, typer.Argument(help="a JSON value (true, 20, null, {...}) or a string")],
) -> None:
    """Change one cluster setting; every manager uses it from its next cycle, no restart."""
    body: dict[str, Any] = {}
    node = body
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = given = _value(value)
    now: Any = connect().raw.cluster.configure(body)
    for part in key.split("."):  # what the cluster uses now, as the answer says (a merge may differ)
        now = now.get(part) if isinstance(now, dict) else None
    typer.echo(f"{key} = {json.dumps(now)}")
    if now != given and isinstance(given, dict):
        typer.echo(f"({key} merges what is given into what it was; null clears it)", err=True)


PROJECT_COLUMNS = [
    ("NAME", "name"),
    ("POLICIES", "retry_policies"),
    ("RETRY DEFAULTS", "retry_defaults"),
    ("PRIORITY RULES", "priority_rules"),
    ("CREATED", "created_at"),
]


UNSET: Any = object()


def json_object(
    raw: str | None, option: str = "--retry-defaults", example: str = '{"max_retries": 2}'
) -> Any:
    """The JSON object given (or None for null, which clears); UNSET when the option was not given."""
    if raw is None:
        return UNSET
    value = _value(raw)
    if value is not None and not isinstance(value, dict):
        raise fail(f"{option} expects a JSON object, e.g. '{example}', or null", 2)
    return value


PRIORITY_EXAMPLE = '{"default": 5, "may_change": true, "min": 0, "max": 20}'
PriorityRulesOpt = Annotated[
    str | None,
    typer.Option(
        "--priority-rules", help=f"priority rules as JSON, e.g. '{PRIORITY_EXAMPLE}' (merged; null clears)"
    ),
]


def priority_rules(raw: str | None) -> Any:
    return json_object(raw, "--priority-rules", PRIORITY_EXAMPLE)


@project_app.command("create")
def project_create(
    name: str,
    retry_defaults: Annotated[str | None, typer.Option(help="inline policy defaults as JSON")] = None,
    policy: Annotated[list[str] | None, typer.Option("--policy", help="bind a named policy (repeat)")] = None,
    priority: PriorityRulesOpt = None,
    output: Format = OutputOpt,
) -> None:
    """Create a project."""
    d, r = json_object(retry_defaults), priority_rules(priority)
    made = connect().projects.create(name, None if d is UNSET else d, policy or [], None if r is UNSET else r)
    emit(made, output, PROJECT_COLUMNS)


@project_app.command("update")
def project_update(
    name: str,
    retry_defaults: Annotated[
        str | None, typer.Option(help="inline policy defaults as JSON ({} clears)")
    ] = None,
    policy: Annotated[
        list[str] | None, typer.Option("--policy", help="the bound policies (repeat; replaces)")
    ] = None,
    no_policies: Annotated[bool, typer.Option("--no-policies", help="unbind every policy")] = False,
    priority: PriorityRulesOpt = None,
    output: Format = OutputOpt,
) -> None:
    """Change a project's retry defaults, bound policies or priority rules."""
    body: dict[str, Any] = {}
    if (d := json_object(retry_defaults)) is not UNSET:
        body["retry_defaults"] = d
    if (r := priority_rules(priority)) is not UNSET:
        body["priority_rules"] = r
    if policy or no_policies:
        body["retry_policies"] = policy or []
    emit(connect().raw.projects.update(name, **body), output, PROJECT_COLUMNS)


@project_app.command("get")
def project_get(name: str, output: Format = OutputOpt) -> None:
    """Show a project."""
    emit(connect().raw.projects.get(name), output, PROJECT_COLUMNS)


@project_app.command("list")
def project_list(output: Format = OutputOpt) -> None:
    """Every project."""
    emit(connect().raw.projects.list(), output, PROJECT_COLUMNS)


@audit_app.command("list")
def audit_list(
    action: Annotated[str | None, typer.Option(help="only this action, e.g. retry.auto")] = None,
    after: Annotated[int, typer.Option(help="start after this row id")] = 0,
    limit: Annotated[int, typer.Option(help="at most this many")] = 100,
    output: Format = OutputOpt,
) -> None:
    """Who did what, when, and why: automatic and manual retries, admin changes."""
    emit(
        connect().raw.cluster.audit(after, limit, action or None),
        output,
        [
            ("ID", "id"),
            ("TIME", "created_at"),
            ("ACTOR", "actor"),
            ("ACTION", "action"),
            ("TARGET", "target"),
            ("REASON", "reason"),
        ],
    )
