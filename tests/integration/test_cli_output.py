"""The CLI's views of a session whose messages look like Rich markup (every torch/gloo peer error
has a "[/__w/pytorch/…]"): each exits 0 and shows the text as it is."""

from __future__ import annotations

import json

from tests.support.cluster import Cluster

MARKUP = "[/x] [bold]y [/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553]"
FAILS = f"""
import os
from corral_worker import record
open(os.environ["CORRAL_TERMINATION_LOG"], "w").write({MARKUP!r})
with record():
    raise RuntimeError({MARKUP!r})
"""


def test_every_view_prints_markup_literally(cluster: Cluster) -> None:
    s = cluster.submit(
        command=["python3", "-c", FAILS], retry_policy={"max_retries": 1, "retry_delay": 0, "jitter": "none"}
    )
    ended = cluster.wait(s["id"])
    assert ended["status"] == "ERROR"
    views = {
        ("session", "errors", s["id"]): True,
        ("session", "info", s["id"]): True,
        ("session", "history", s["id"]): False,
        ("session", "attempts", s["id"]): False,
        ("session", "list", "--limit", "5"): False,
        ("events", "--session", s["id"]): False,
        ("agent", "list"): False,
    }
    for args, shows_message in views.items():
        done = cluster.corral(*args)
        assert done.returncode == 0, (args, done.stderr)
        assert "MarkupError" not in done.stderr
        if shows_message:
            assert MARKUP in done.stdout, (args, done.stdout)
    errors = json.loads(cluster.corral("session", "errors", s["id"], "-o", "json").stdout)
    assert errors[0]["message"] == MARKUP
