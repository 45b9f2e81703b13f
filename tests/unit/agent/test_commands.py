"""The agent's commands to its supervisor go over the pipe as JSON and come back as the same typed
commands; a field neither side knows, or a start without a program, is refused whole."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.agent.commands import COMMANDS, Account, Command, Kill, Ping, Start, Term

START = Start(
    key="k.0",
    command=("sh", "-c", "echo é"),
    env={"A": "1", "EMPTY": ""},
    cwd="/tmp",
    stdout="/tmp/out",
    stderr="/tmp/err",
    mem_limit=64 << 20,
    cpus=1.5,
    grace=2.5,
    user=Account(uid=65534, gid=65534),
)


@pytest.mark.parametrize(
    "command", [START, Term(key="k.0", grace=0.0), Term(key="k.0"), Kill(key="k.0"), Ping(fence_at=12.5)]
)
def test_a_command_reads_back_as_it_was_sent(command: Command) -> None:
    assert COMMANDS.validate_json(command.model_dump_json()) == command


@pytest.mark.parametrize(
    "line",
    [
        '{"op": "kill", "key": "k.0", "signal": 9}',  # a field no side knows
        '{"op": "stop", "key": "k.0"}',  # no such command
        START.model_dump_json().replace('"command":["sh","-c","echo é"]', '"command":[]'),
        START.model_dump_json().replace('"uid":65534', '"uid":"root"'),
    ],
)
def test_a_command_the_supervisor_does_not_know_is_refused_whole(line: str) -> None:
    with pytest.raises(ValidationError):
        COMMANDS.validate_json(line)
