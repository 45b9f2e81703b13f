"""`GET /api/v1/sessions/{id}/logs/stream` on a real manager, both backends: one kernel's output
live, before its session ends; resumed at any byte offset (`Last-Event-ID` or `after`) with nothing
missed or repeated; over with `event: end` once the session has ended; only the session's
project's members; bad input refused naming the field."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from corral.services.errors import InvalidInput
from corral.services.log_stream import Position
from tests.support.cluster import TERMINAL, Cluster, poll, scratch
from tests.support.sse import Subscriber
from tests.support.tenants import client, make_user

# Interleaved stdout and stderr, flushed line by line: several pieces of each stream.
TWO_STREAMS = """
import sys
for i in range(30):
    out = sys.stdout if i % 3 else sys.stderr
    out.write(f"line {i:02d} of {out.name}\\n")
    out.flush()
"""


def _path(session_id: str) -> str:
    return f"/api/v1/sessions/{session_id}/logs/stream"


def _whole(cluster: Cluster, session_id: str, **kw: Any) -> Subscriber:
    """A stream read to its end (the session has ended), and closed."""
    sub = Subscriber(cluster.url, cluster.key, path=_path(session_id), **kw)
    try:
        assert sub.ended.wait(60), "the stream did not end"
        assert sub.status == 200
    finally:
        sub.close()
    return sub


def _texts(sub: Subscriber) -> dict[str, str]:
    got: dict[str, str] = {"stdout": "", "stderr": ""}
    for m in sub.messages:
        if m.event == "output":
            got[m.json()["stream"]] += m.json()["text"]
    return got


def test_output_is_streamed_live_and_the_stream_ends_with_the_session(cluster: Cluster) -> None:
    gate = scratch(cluster.workdir / f"gate-{uuid.uuid4().hex[:6]}")
    script = f"echo first; while [ ! -e {gate}/go ]; do sleep 0.05; done; echo second"
    s = cluster.submit(command=["sh", "-c", script])
    sub = Subscriber(cluster.url, cluster.key, path=_path(s["id"]))
    try:
        poll(lambda: _texts(sub)["stdout"] == "first\n", 60, "the first line on the stream")
        assert cluster.session(s["id"])["status"] not in TERMINAL  # live: it waits for the gate
        assert not sub.ended.is_set()
        (gate / "go").touch()
        assert sub.ended.wait(60), "the stream did not end with the session"
        assert _texts(sub)["stdout"] == "first\nsecond\n"
        assert cluster.session(s["id"])["status"] == "TERMINATED"
        end = sub.messages[-1]
        assert end.event == "end" and end.json()["status"] == "TERMINATED"
        assert [m.event for m in sub.messages].count("end") == 1
        outputs = [m for m in sub.messages if m.event == "output"]
        assert all(m.id == m.json()["position"] and m.json()["rank"] == 0 for m in outputs)
        assert end.id == outputs[-1].id == end.json()["position"]
        assert outputs[-1].id.startswith("0-")  # generation 0, then the bytes of each stream
    finally:
        sub.close()


def test_a_reconnect_resumes_at_an_offset_with_nothing_missed_or_repeated(cluster: Cluster) -> None:
    s = cluster.submit(command=["python3", "-c", TWO_STREAMS])
    cluster.wait(s["id"])
    whole = _whole(cluster, s["id"])
    assert whole.messages[0].event == "output" and whole.parser.last_id == whole.messages[-1].id
    full = _texts(whole)
    assert full == {
        "stdout": "".join(f"line {i:02d} of <stdout>\n" for i in range(30) if i % 3),
        "stderr": "".join(f"line {i:02d} of <stderr>\n" for i in range(30) if not i % 3),
    }
    outputs = [m for m in whole.messages if m.event == "output"]
    assert len(outputs) >= 2
    # At a piece's id: exactly the messages after it, in the same order.
    k = len(outputs) // 2
    again = _whole(cluster, s["id"], last_id=outputs[k - 1].id)
    assert [(m.id, m.data) for m in again.messages] == [(m.id, m.data) for m in whole.messages[k:]]
    # At byte offsets inside pieces (stdout 13 bytes in, stderr 30): the rest of each, and no more.
    mid = _whole(cluster, s["id"], params={"after": "0-13-30"})
    assert mid.parser.last_id == whole.parser.last_id
    assert _texts(mid) == {"stdout": full["stdout"][13:], "stderr": full["stderr"][30:]}
    first = next(m.json() for m in mid.messages if m.json()["stream"] == "stdout")
    assert first["offset"] == 13
    # Last-Event-ID wins over `after` (EventSource's reconnect keeps the first URL).
    header = _whole(cluster, s["id"], last_id="0-13-30", params={"after": "0"})
    assert _texts(header) == _texts(mid)
    # At the end: only `end`, at once.
    done = _whole(cluster, s["id"], last_id=whole.parser.last_id)
    assert [m.event for m in done.messages] == ["end"]


def test_the_stream_opens_with_where_it_starts(cluster: Cluster) -> None:
    s = cluster.submit(command=["true"])
    cluster.wait(s["id"])
    with (
        client(cluster, cluster.key) as http,
        http.stream("GET", _path(s["id"]), params={"after": "0-5"}) as resp,
    ):
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        assert next(resp.iter_lines()) == "id: 0-5-0-0"


def test_another_projects_user_gets_404(cluster: Cluster) -> None:
    tag = uuid.uuid4().hex[:6]
    key = make_user(cluster, f"carol-{tag}", [f"c-{tag}"])
    s = cluster.submit(command=["true"])
    with client(cluster, key) as theirs:
        resp = theirs.get(_path(s["id"]))
        assert resp.status_code == 404 and resp.json()["error"]["details"]["field"] == "id", resp.text
        mine = theirs.post("/api/v1/sessions", json={"command": ["echo", "hers"], "project": f"c-{tag}"})
        assert mine.status_code == 201, mine.text
        cluster.wait(mine.json()["id"])
        with theirs.stream("GET", _path(mine.json()["id"])) as ok:
            assert ok.status_code == 200


@pytest.mark.parametrize(
    ("params", "headers", "field"),
    [
        ({"kernel": "1"}, {}, "kernel"),  # a session of one kernel
        ({"kernel": "-1"}, {}, "kernel"),
        ({"kernel": "x"}, {}, "kernel"),
        ({"kernel": str(2**70)}, {}, "kernel"),
        ({"after": "x"}, {}, "after"),
        ({"after": "1-2-3-4-5"}, {}, "after"),
        ({"after": "0--1"}, {}, "after"),
        ({"after": f"{2**31}-0"}, {}, "after"),
        ({"after": f"0-{2**63}"}, {}, "after"),
        ({"after": "9" * 81}, {}, "after"),
        ({}, {"Last-Event-ID": "0-x"}, "last-event-id"),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    cluster: Cluster, params: dict[str, str], headers: dict[str, str], field: str
) -> None:
    s = cluster.submit(command=["true"])
    resp = cluster.http.get(_path(s["id"]), params=params, headers=headers)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["details"]["field"] == field, resp.text


def test_positions_read_and_move_as_documented() -> None:
    assert Position.parse(None, "after") == Position() and str(Position()) == "0-0-0-0"
    assert Position.parse("0-120", "after") == Position(0, (120, 0, 0))
    at = Position(1, (5, 6, 7))
    assert at.past(1, "stderr", 9) == Position(1, (5, 9, 7))
    assert at.past(2, "prepare", 3) == Position(2, (0, 0, 3))  # a later placement: from 0 again
    with pytest.raises(InvalidInput) as refused:
        Position.parse("\u0661-2", "last-event-id")  # digits, but not ASCII ones
    assert refused.value.details == {"field": "last-event-id"}
