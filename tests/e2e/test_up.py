"""`corral up` as a user runs it: zero configuration, then the CLI from another shell."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.support.cluster import poll
from tests.support.postgres import free_port


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("home")
    port = free_port()
    # A user's environment: nothing Corral-specific but where their home directories are.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(CORRAL_HOME=str(home / "data"), XDG_CONFIG_HOME=str(home / "config"))
    log = (home / "up.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "up", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        config = home / "config" / "corral" / "config.json"
        poll(config.exists, 30, "corral up to save the CLI config")
        key = json.loads(config.read_text())["api_key"]

        def two_agents() -> bool:
            try:
                agents = httpx.get(
                    f"http://127.0.0.1:{port}/api/v1/agents",
                    headers={"Authorization": f"Bearer {key}"},
                    timeout=2,
                ).json()
            except (httpx.HTTPError, ValueError):
                return False
            return isinstance(agents, list) and sum(a["status"] == "ALIVE" for a in agents) == 2

        poll(two_agents, 60, "two local agents")
        yield env
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
        print((home / "up.log").read_text()[-3000:])


def corral(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "corral", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_up_then_run_prints_exactly_42(embedded: dict[str, str]) -> None:
    done = corral(embedded, "run", "--", "python3", "-c", "print(42)")
    assert (done.returncode, done.stdout) == (0, "42\n"), done.stderr


def test_up_then_failing_run_exits_with_its_code(embedded: dict[str, str]) -> None:
    done = corral(embedded, "run", "--", "sh", "-c", "exit 3")
    assert done.returncode == 3
    sessions = json.loads(corral(embedded, "session", "list", "-o", "json").stdout)
    latest = sessions[0]
    assert (latest["status"], latest["cause"]) == ("ERROR", "kernel_nonzero_exit")


def test_help_explains_the_commands(embedded: dict[str, str]) -> None:
    done = corral(embedded, "run", "--help")
    assert done.returncode == 0
    for word in ("--cpu", "--mem", "--cluster-size", "--detach", "exit code"):
        assert word in done.stdout


def test_agents_say_how_they_limit_memory(embedded: dict[str, str]) -> None:
    agents = json.loads(corral(embedded, "agent", "list", "-o", "json").stdout)
    assert len(agents) == 2
    for a in agents:
        assert a["info"]["memory_mode"] in {"cgroup2", "cgroup1", "watchdog"}
        assert a["info"]["memory_mode_why"], "the agent says why it chose that mode"
    table = corral(embedded, "agent", "list").stdout
    assert "MEMORY LIMITS" in table and agents[0]["info"]["memory_mode"] in table


def test_agent_list_shows_memory_in_binary_units_and_json_in_bytes(embedded: dict[str, str]) -> None:
    from corral.cli.output import binary_size

    agents = json.loads(corral(embedded, "agent", "list", "-o", "json").stdout)
    assert all(isinstance(a["capacity"]["mem"], int) for a in agents)
    table = corral(embedded, "agent", "list").stdout
    for a in agents:
        shown = binary_size(a["capacity"]["mem"])
        assert shown is not None and shown.endswith("iB") and shown in table, table
        assert str(a["capacity"]["mem"]) not in table
