"""`corral run [opts] -- CMD...`: submit a session and follow it."""

import contextlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, cast

import typer

from corral.cli import arrays
from corral.cli.connect import connect, fail
from corral.cli.follow import Chain, exit_code_of
from corral.cli.output import Format, OutputOpt, emit

if TYPE_CHECKING:
    from corral.client import Client
    from corral.client.requests import SessionRequest

RETRY = "Retries"


def _here() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # deleted under us: the kernels start in their own directories
        return None


def run(
    command: Annotated[list[str] | None, typer.Argument(help="the command to run, after --")] = None,
    cpu: Annotated[str | None, typer.Option(help="CPU cores per kernel (e.g. 1, 0.5, 500m)")] = None,
    mem: Annotated[str | None, typer.Option(help="memory per kernel, binary units (64M, 2G)")] = None,
    gpu: Annotated[int | None, typer.Option(help="GPUs per kernel")] = None,
    resource: Annotated[
        list[str] | None, typer.Option("--resource", "-r", help="custom slot NAME=AMOUNT")
    ] = None,
    cluster_size: Annotated[int, typer.Option(help="kernels in the gang")] = 1,
    priority: Annotated[
        int | None, typer.Option(help="0..100; default and allowed range: your project's (corral whoami)")
    ] = None,
    name: Annotated[str | None, typer.Option(help="session name")] = None,
    resource_group: Annotated[str, typer.Option(help="resource group")] = "default",
    project: Annotated[
        str | None,
        typer.Option(help="project (default: your only one, else your default_project: corral whoami)"),
    ] = None,
    chdir: Annotated[
        str | None,
        typer.Option(
            "--chdir",
            "-D",
            help="directory the kernels start in, as sbatch's (default: this one; the kernel's own is"
            " $CORRAL_WORK_DIR)",
        ),
    ] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE for the kernels")] = None,
    image: Annotated[
        str | None,
        typer.Option(help="the environment to run in, by the name agents offer it (corral agent images)"),
    ] = None,
    timeout: Annotated[int | None, typer.Option(help="seconds from start before deadline_exceeded")] = None,
    dispersed: Annotated[bool, typer.Option(help="spread kernels over agents")] = False,
    error_strategy: Annotated[
        str | None,
        typer.Option(
            help="how a failed gang's root cause is chosen: single, earliest or earliest_primary "
            "(default earliest_primary with --cluster-size > 1, else single)"
        ),
    ] = None,
    max_retries: Annotated[
        int | None, typer.Option(help="retries after the first attempt (default 0)", rich_help_panel=RETRY)
    ] = None,
    retry_delay: Annotated[
        str | None,
        typer.Option(help="before the first retry: seconds or 10s, 5m (default 60)", rich_help_panel=RETRY),
    ] = None,
    backoff: Annotated[str | None, typer.Option(help="fixed or exponential", rich_help_panel=RETRY)] = None,
    backoff_multiplier: Annotated[
        float | None, typer.Option(help="growth of exponential backoff (default 2)", rich_help_panel=RETRY)
    ] = None,
    max_retry_delay: Annotated[
        str | None, typer.Option(help="cap on any delay (default 1h, at most 24h)", rich_help_panel=RETRY)
    ] = None,
    jitter: Annotated[
        str | None, typer.Option(help="none, deterministic (default) or random", rich_help_panel=RETRY)
    ] = None,
    jitter_ratio: Annotated[
        float | None,
        typer.Option(help="spread as a fraction of the delay (default 0.25)", rich_help_panel=RETRY),
    ] = None,
    retry_on: Annotated[
        list[str] | None,
        typer.Option(help="a cause to retry (repeat; replaces the default set)", rich_help_panel=RETRY),
    ] = None,
    anti_affinity: Annotated[
        str | None, typer.Option(help="node: a retry avoids the failed node (soft)", rich_help_panel=RETRY)
    ] = None,
    max_retry_duration: Annotated[
        str | None,
        typer.Option(help="no retry starts this long after the first start", rich_help_panel=RETRY),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option("--policy", help="a named retry policy to add (repeat)", rich_help_panel=RETRY),
    ] = None,
    array: Annotated[
        str | None,
        typer.Option(
            help="a job array: one session per index, e.g. 0-49, 1-1000:10, 1,3,5; each sees "
            "$CORRAL_ARRAY_INDEX (followed with a progress bar, not its output)"
        ),
    ] = None,
    prefix: Annotated[
        bool | None, typer.Option("--prefix/--no-prefix", help="prefix lines with rank")
    ] = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="submit and print the session")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no status lines on stderr")] = False,
    output: Format = OutputOpt,
) -> None:
    """Run CMD as a session and follow it: its output on stdout/stderr, status lines on stderr.

    With a retry policy, each attempt is followed in turn ("attempt 2 of 4 after ..." on stderr).
    Exits with the last attempt's code: the root-cause kernel's exit code, 137 for an OOM kill,
    1 when there is no kernel exit code (agent lost, timeout, cancel), 0 on success.

    With --array, one session per index, followed with a progress bar (their output: corral
    session logs); exits 0 only if every element succeeded.
    """
    if not command:
        raise fail("no command given: corral run [OPTIONS] -- CMD [ARGS...]", 2)
    resources: dict[str, object] = {}
    if cpu is not None:
        resources["cpu"] = cpu
    if mem is not None:
        resources["mem"] = mem
    if gpu is not None:
        resources["gpu"] = gpu
    for item in resource or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise fail(f"--resource expects NAME=AMOUNT, got {item!r}", 2)
        resources[key] = value
    envs = {}
    for item in env or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise fail(f"--env expects KEY=VALUE, got {item!r}", 2)
        envs[key] = value
    body: dict[str, object] = {
        "command": command,
        "cluster_size": cluster_size,
        "env": envs,
        "resource_group": resource_group,
    }
    # Like sbatch: the kernels start where the user submits from (a path on the agents' hosts).
    workdir = os.path.abspath(chdir) if chdir is not None else _here()
    if workdir is not None:
        body["workdir"] = workdir
    if project is not None:
        body["project"] = project
    if resources:
        body["resources"] = {"cpu": 1, **resources}
    extras: dict[str, object] = {
        "priority": priority,
        "name": name,
        "timeout": timeout,
        "error_strategy": error_strategy,
        "image": image,
    }
    body.update({k: v for k, v in extras.items() if v is not None})
    if dispersed:
        body["placement"] = "dispersed"
    retry = {
        "max_retries": max_retries,
        "retry_delay": retry_delay,
        "backoff": backoff,
        "backoff_multiplier": backoff_multiplier,
        "max_retry_delay": max_retry_delay,
        "jitter": jitter,
        "jitter_ratio": jitter_ratio,
        "eligible_causes": retry_on,
        "anti_affinity": anti_affinity,
        "max_retry_duration": max_retry_duration,
    }
    if any(v is not None for v in retry.values()):
        body["retry_policy"] = {k: v for k, v in retry.items() if v is not None}
    if policy:
        body["retry_policies"] = policy
    spec = cast("SessionRequest", body)
    api = connect()
    # Its answers are read into result types, built here before anything is sent: read first at
    # the submit's answer, they took a loaded machine a second or more, and a Ctrl-C then, after
    # the session was made but before it was followed, left it running.
    ready_results()
    if array is not None:
        made = api.arrays.submit(array, **spec)
        if detach:
            typer.echo(made.array_id) if output is Format.table else emit(made, output)
            return
        if not quiet:
            print(f"corral: array {made.array_id}: {made.size} sessions", file=sys.stderr)
        try:
            ended = arrays.wait_for(api, made.array_id, quiet)
        except KeyboardInterrupt:
            print(f"\ncorral: cancelling array {made.array_id[:8]}", file=sys.stderr)
            _cancel(lambda c: c.arrays.cancel(made.array_id))
            raise typer.Exit(130) from None
        raise typer.Exit(arrays.exit_code(ended))
    session = api.sessions.submit(**spec)
    if detach:
        typer.echo(session.id) if output is Format.table else emit(session, output)
        return
    chain = Chain(api, session.id, prefix, quiet)
    try:
        final = chain.follow()
    except KeyboardInterrupt:
        # Cancelling an ended attempt stops its chain: no retry of it is made after we leave.
        print(f"\ncorral: cancelling session {chain.current[:8]} and its retries", file=sys.stderr)
        _cancel(lambda c: c.sessions.cancel(chain.current))
        raise typer.Exit(130) from None
    raise typer.Exit(exit_code_of(final))


def ready_results() -> None:
    from corral.client import models

    for model in (models.Session, models.Array, models.LogPage):
        model.model_rebuild(force=True)


def _cancel(how: "Callable[[Client], object]") -> None:
    """On Ctrl-C, through a client of its own: the interrupted request may have left the first
    one's connection pool mid-request. Nothing left to stop is fine: we stop anyway."""
    from corral.client import CorralError

    with contextlib.suppress(CorralError), connect() as fresh:
        how(fresh)
