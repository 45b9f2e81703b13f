"""`corral up` as a user starts it: its own HOME, zero configuration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.support.cluster import healthy, poll
from tests.support.postgres import free_port


class Up:
    """One `corral up` process with its own HOME (data and config) and port."""

    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # A user's environment: nothing Corral-specific but where their home directories are.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        self.env.update(CORRAL_HOME=str(home / "data"), XDG_CONFIG_HOME=str(home / "config"), **(env or {}))
        self.config = home / "config" / "corral" / "config.json"
        self.log_path = home / "up.log"
        home.mkdir(parents=True, exist_ok=True)
        self.start(*args)

    def start(self, *args: str) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "corral", "up", "--port", str(self.port), *args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        poll(lambda: self.config.exists() and healthy(self.url), 30, "corral up to answer")
        self.key = json.loads(self.config.read_text())["api_key"]
        poll(lambda: self.alive_agents() == 2, 60, "two local agents")

    def alive_agents(self) -> int:
        try:
            agents = self.get("/api/v1/agents")
        except (httpx.HTTPError, ValueError):
            return 0
        return sum(a["status"] == "ALIVE" for a in agents) if isinstance(agents, list) else 0

    def get(self, path: str, key: str | None = None) -> Any:
        return httpx.get(
            self.url + path, headers={"Authorization": f"Bearer {key or self.key}"}, timeout=5
        ).json()

    def corral(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "corral", *args], env=self.env, capture_output=True, text=True, timeout=120
        )

    def tree(self) -> set[int]:
        """Every process of this installation: `corral up`, its agents, supervisors and kernels."""
        root = psutil.Process(self.proc.pid)
        return {root.pid, *(p.pid for p in root.children(recursive=True))}

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 40) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.stop(signal.SIGTERM, 30)
            except subprocess.TimeoutExpired:
                pass
        for p in psutil.process_iter(["environ"]):
            try:
                if (p.info["environ"] or {}).get("CORRAL_HOME") == self.env["CORRAL_HOME"]:
                    p.kill()
            except psutil.Error:
                continue

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
