"""`corral webhook …` through the real CLI against a real manager: the secret printed once, the
webhook listed, changed, tested and deleted; bad input exits non-zero naming what is wrong."""

from __future__ import annotations

from tests.support.cluster import Cluster, poll
from tests.support.receiver import Receiver

PUBLIC = "https://93.184.216.34/hook"  # a global address: no DNS, no refusal; never enabled here


def test_create_prints_the_secret_once_and_the_rest_never(cluster: Cluster) -> None:
    made = cluster.corral("webhook", "create", PUBLIC, "-e", "session.retry_*", "--disabled")
    assert made.returncode == 0, made.stderr
    assert "whsec_" in made.stdout and "Keep the secret now" in made.stdout
    [hook_id] = [w["id"] for w in cluster.corral_json("webhook", "list") if w["id"] in made.stdout]
    shown = cluster.corral("webhook", "get", hook_id)
    assert shown.returncode == 0 and PUBLIC in shown.stdout and "whsec_" not in shown.stdout
    changed = cluster.corral_json(
        "webhook", "update", hook_id, "-e", "session.created", "-e", "session.retry_*"
    )
    assert changed["events"] == ["session.created", "session.retry_*"] and changed["enabled"] is False
    rotated = cluster.corral_json("webhook", "rotate", hook_id)
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] not in made.stdout
    gone = cluster.corral("webhook", "delete", hook_id)
    assert gone.returncode == 0 and hook_id in gone.stdout
    assert hook_id not in cluster.corral("webhook", "list").stdout


def test_bad_input_exits_non_zero_naming_what_is_wrong(cluster: Cluster) -> None:
    for argv, words in [
        (["create", "ftp://93.184.216.34/", "-e", "session.*"], "url"),
        (["create", PUBLIC, "-e", "nothing.*"], "events"),
        (["create", PUBLIC], "--events"),
        (["update", "0000"], "nothing to change"),
        (["get", "no-such-webhook"], "no webhook"),
    ]:
        done = cluster.corral("webhook", *argv)
        assert done.returncode != 0 and words in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr


def test_test_shows_the_delivery_to_a_receiver(cluster: Cluster) -> None:
    assert cluster.corral("config", "set", "webhooks.allow_private", "true").returncode == 0
    try:
        with Receiver() as rx:
            made = cluster.corral_json("webhook", "create", rx.url, "-e", "webhook.test")
            sent = cluster.corral("webhook", "test", made["id"], "-o", "json")
            assert sent.returncode == 0, sent.stderr
            assert '"status": "delivered"' in sent.stdout and '"response_code": 200' in sent.stdout
            poll(lambda: rx.received, 10, "the test event at the receiver")
            assert rx.received[0].json()["type"] == "webhook.test"
            listed = cluster.corral("webhook", "deliveries", made["id"])
            assert listed.returncode == 0 and "webhook.test" in listed.stdout and "delivered" in listed.stdout
            assert cluster.corral("webhook", "delete", made["id"]).returncode == 0
    finally:
        assert cluster.corral("config", "set", "webhooks.allow_private", "false").returncode == 0
