"""A job array through the client: submitted, awaited, its elements listed by index."""

from __future__ import annotations

from corral.client import Client


def test_an_array_settles_with_each_element_by_index(corral: Client) -> None:
    a = corral.arrays.submit(
        "0-2", command=["sh", "-c", 'exit "$CORRAL_ARRAY_INDEX"'], resources={"cpu": 0.5}
    )
    assert a.size == 3
    done = corral.wait_array(a.array_id, timeout=90)
    assert done.settled and done.succeeded == 1, done
    elements = corral.sessions.list(array=a.array_id)
    assert [(e.array_index, e.exit_code) for e in elements] == [(0, 0), (1, 1), (2, 2)]
    assert corral.arrays.cancel(a.array_id).array_id == a.array_id
