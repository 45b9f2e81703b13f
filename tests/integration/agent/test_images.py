"""Sessions run in the environments agents offer: built once (PULLING), shared by hash, entered
through PATH and VIRTUAL_ENV; a build that fails is image_pull_failure, retried by policy.

Builds install a wheel made here: no index is reached (PIP_NO_INDEX on the agent)."""

from __future__ import annotations

import base64
import hashlib
import json
import signal
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from tests.support.cluster import Cluster, poll

PRINT = "import corral_probe, os, sys; print(corral_probe.VALUE, os.environ['VIRTUAL_ENV'] == sys.prefix)"


def wheel(where: Path, value: str) -> Path:
    """A pure-Python wheel of the package `corral_probe`, whose VALUE is `value`."""
    files = {
        "corral_probe/__init__.py": f"VALUE = {value!r}\n",
        "corral_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: corral-probe\nVersion: 1.0\n",
        "corral_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: corral-tests\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
        f"{len(text.encode())}"
        for name, text in files.items()
    ]
    files["corral_probe-1.0.dist-info/RECORD"] = (
        "\n".join([*record, "corral_probe-1.0.dist-info/RECORD,,"]) + "\n"
    )
    path = where / "corral_probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    path.chmod(0o644)
    return path


def with_images(c: Cluster, agent_id: str, images: dict) -> None:
    c.start_agent(agent_id, CORRAL_AGENT_IMAGES=json.dumps(images), PIP_NO_INDEX="1")


def statuses(c: Cluster, session_id: str) -> list[str]:
    return [h["to_status"] for h in c.history(session_id) if h["to_status"]]


def test_a_requirements_image_is_built_once_and_its_packages_import(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    c = own_cluster()
    with_images(c, "builder", {"probe": {"requirements": [str(wheel(tmp_path, "from-the-wheel"))]}})
    assert c.agent("builder")["info"]["images"] == {"probe": {"kind": "requirements", "ready": False}}
    first = c.submit(command=["python", "-c", PRINT], image="probe")
    done = c.wait(first["id"], timeout=180)
    assert (done["status"], done["result"]) == ("TERMINATED", "success"), done
    assert "PULLING" in statuses(c, first["id"]), statuses(c, first["id"])
    events = c.http.get("/api/v1/events", params={"session": first["id"], "type": "session.status_changed"})
    hops = [(e["from_status"], e["to_status"]) for e in events.json()]
    assert ("PREPARING", "PULLING") in hops and ("PULLING", "PREPARED") in hops, hops
    assert c.output(first["id"]).split() == ["from-the-wheel", "True"]
    # pip's output is the kernel's preparation log, apart from what its process printed.
    prepared = c.output(first["id"], streams=("prepare",))
    assert "-m venv" in prepared and "Successfully installed corral-probe" in prepared, prepared
    poll(lambda: c.agent("builder")["info"]["images"]["probe"]["ready"], 30, "the agent to say it is built")

    second = c.submit(command=["python", "-c", PRINT], image="probe")
    assert c.wait(second["id"], timeout=60)["status"] == "TERMINATED"
    assert "PULLING" not in statuses(c, second["id"]), "built once: the second session waits for nothing"
    assert c.output(second["id"]).split() == ["from-the-wheel", "True"]
    assert c.output(second["id"], streams=("prepare",)) == "", "nothing was built for it"
    builds = list((c.workdir / "builder" / "images" / "envs").iterdir())
    assert len(builds) == 1 and (builds[0] / "READY").is_file(), builds
    shown = c.corral("agent", "images")
    assert shown.returncode == 0 and "probe" in shown.stdout and "True" in shown.stdout, shown


def test_a_broken_requirement_is_image_pull_failure_with_pips_words_and_is_retried(
    own_cluster: Callable[..., Cluster],
) -> None:
    c = own_cluster()
    with_images(c, "builder", {"broken": {"requirements": ["corral-no-such-package==9.9"]}})
    s = c.submit(
        command=["true"], image="broken", retry_policy={"max_retries": 1, "retry_delay": 0, "jitter": "none"}
    )
    first = c.wait(s["id"], timeout=120)
    assert (first["status"], first["cause"]) == ("ERROR", "image_pull_failure"), first
    message = first["root_cause"]["message"]
    assert "building image 'broken' failed" in message and "corral-no-such-package" in message, message
    # The whole of pip's output is kept, and `corral session logs` shows it (on stderr).
    logs = c.corral("session", "logs", s["id"])
    assert logs.returncode == 0 and logs.stdout == "", logs
    assert "-m pip" in logs.stderr and "corral-no-such-package" in logs.stderr, logs.stderr
    poll(lambda: c.session(s["id"]).get("next_attempt_id"), 30, "its retry")
    retry = c.wait(c.session(s["id"])["next_attempt_id"], timeout=120)
    assert (retry["status"], retry["cause"], retry["attempt"]) == ("ERROR", "image_pull_failure", 2), retry
    assert not any((c.workdir / "builder" / "images" / "envs").glob("*/READY")), "nothing half-built is used"


def test_an_interpreter_a_venv_and_a_directory_are_entered_through_path(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "corral-hello").write_text("#!/bin/sh\necho hello from the tools\n")
    (tools / "corral-hello").chmod(0o755)
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    for d in (tmp_path, tools, venv):
        d.chmod(0o755)  # kernels run as another account must reach them
    c = own_cluster()
    images = {"py": {"python": "/usr/bin/python3"}, "env": {"venv": str(venv)}, "tools": {"path": str(tools)}}
    with_images(c, "offers", images)
    runs = {
        "py": ["python", "-c", "import sys; print(sys.version_info[:2] == (3, 11))"],
        "env": ["python", "-c", "import os, sys; print(os.environ['VIRTUAL_ENV'] == sys.prefix)"],
        "tools": ["corral-hello"],
    }
    made = {image: c.submit(command=argv, image=image)["id"] for image, argv in runs.items()}
    for image, sid in made.items():
        done = c.wait(sid)
        assert done["status"] == "TERMINATED", (image, done)
        assert "PULLING" not in statuses(c, sid), f"{image} needs no build"
    assert c.output(made["py"]).strip() == "True"
    assert c.output(made["env"]).strip() == "True"
    assert c.output(made["tools"]).strip() == "hello from the tools"


def test_an_agent_whose_image_cannot_be_used_does_not_start(tmp_path: Path) -> None:
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "corral",
            "agent",
            "--work-dir",
            str(tmp_path),
            "--image",
            'torch={"venv": "/nowhere"}',
        ],
        env={"CORRAL_AGENT_TOKEN": "t", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2, bad
    assert "image 'torch': /nowhere is not a virtualenv" in bad.stderr and "Traceback" not in bad.stderr


def test_sessions_naming_an_image_land_only_on_agents_offering_it(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    tmp_path.chmod(0o755)
    c = own_cluster()
    c.start_agent("plain", cpu=4)
    with_images(c, "offers", {"tools": {"path": str(tmp_path)}})
    made = [c.submit(command=["sleep", "0.2"], image="tools")["id"] for _ in range(6)]
    for sid in made:
        done = c.wait(sid)
        assert done["status"] == "TERMINATED" and [k["agent"] for k in done["kernels"]] == ["offers"], done

    refused = c.http.post("/api/v1/sessions", json={"command": ["true"], "image": "nobody-offers"})
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["details"]["field"] == "image", refused.text

    c.signal_agent("offers", signal.SIGTERM)  # it leaves: the image is still known, nobody offers it
    poll(lambda: c.agent("offers") is None, 30, "the agent to leave")
    waiting = c.submit(command=["true"], image="tools")
    said = lambda: any(  # noqa: E731
        "offers image 'tools'" in (h["message"] or "") for h in c.history(waiting["id"])
    )
    poll(said, 30, "the session to say why it waits")
    assert c.session(waiting["id"])["status"] == "PENDING"


def slow_python(where: Path, seconds: int) -> Path:
    """An interpreter that takes `seconds` to finish: a build from it makes its virtualenv (no
    packages yet), then waits that long."""
    path = where / f"python-then-{seconds}s"
    path.write_text(f'#!/bin/sh\n/usr/bin/python3 "$@"\ncode=$?\nsleep {seconds}\nexit $code\n')
    path.chmod(0o755)
    return path


def test_the_agent_goes_on_working_while_an_image_builds(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    c = own_cluster()
    spec = {"requirements": [str(wheel(tmp_path, "slowly"))], "python": str(slow_python(tmp_path, 30))}
    with_images(c, "builder", {"slow": spec})
    building = c.submit(command=["python", "-c", PRINT], image="slow")
    c.wait(building["id"], {"PULLING"})
    beat = c.agent("builder")["last_heartbeat"]
    quick = [c.submit(command=["sh", "-c", "echo meanwhile"])["id"] for _ in range(3)]
    for sid in quick:
        assert c.wait(sid)["status"] == "TERMINATED"
        assert c.output(sid).strip() == "meanwhile"
    assert c.session(building["id"])["status"] == "PULLING", "the others ran while it built"
    poll(lambda: c.agent("builder")["last_heartbeat"] != beat, 30, "a heartbeat during the build")
    done = c.wait(building["id"], timeout=180)
    assert done["status"] == "TERMINATED" and c.output(building["id"]).split() == ["slowly", "True"]


def test_an_agent_killed_mid_build_builds_again_and_never_runs_in_the_half_built_one(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    c = own_cluster()
    spec = {"requirements": [str(wheel(tmp_path, "whole"))], "python": str(slow_python(tmp_path, 5))}
    with_images(c, "builder", {"slow": spec})
    s = c.submit(command=["python", "-c", PRINT], image="slow")
    envs = c.workdir / "builder" / "images" / "envs"
    poll(lambda: list(envs.glob("*/env/bin/python")), 60, "the virtualenv, its packages still to come")
    c.signal_agent("builder", signal.SIGKILL)
    c.agents["builder"].wait()
    [left] = list(envs.iterdir())
    assert not (left / "READY").exists(), "killed mid-build: nothing says it is built"
    with_images(c, "builder", {"slow": spec})
    done = c.wait(s["id"], timeout=180)
    assert done["status"] == "TERMINATED", done
    assert c.output(s["id"]).split() == ["whole", "True"]
    assert [p.name for p in envs.iterdir()] == [left.name]
    assert (left / "READY").is_file()


def test_a_build_past_the_pulling_timeout_ends_the_session_and_goes_on_for_the_next(
    own_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    """DESIGN's PULLING timeout bounds a session's wait for its image (re-queued, then
    `scheduler_timeout` after `max_reschedules`); the build it waited for still finishes, once."""
    c = own_cluster(env={"CORRAL_PULLING_TIMEOUT": "1.5", "CORRAL_MAX_RESCHEDULES": "1"})
    spec = {"requirements": [str(wheel(tmp_path, "later"))], "python": str(slow_python(tmp_path, 8))}
    with_images(c, "builder", {"slow": spec})
    s = c.submit(command=["python", "-c", PRINT], image="slow")
    ended = c.wait(s["id"], timeout=60)
    assert (ended["status"], ended["cause"]) == ("ERROR", "scheduler_timeout"), ended
    assert statuses(c, s["id"]).count("PULLING") == 2, statuses(c, s["id"])  # once re-queued
    poll(lambda: c.agent("builder")["info"]["images"]["slow"]["ready"], 60, "the build to finish")
    after = c.submit(command=["python", "-c", PRINT], image="slow")
    assert c.wait(after["id"], timeout=60)["status"] == "TERMINATED"
    assert "PULLING" not in statuses(c, after["id"])
    assert c.output(after["id"]).split() == ["later", "True"]
    assert len(list((c.workdir / "builder" / "images" / "envs").iterdir())) == 1
