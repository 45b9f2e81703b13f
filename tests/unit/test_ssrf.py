"""The SSRF guard (corral/ssrf.py): a target resolving to a private address is refused, unless the
cluster allows private targets; a name that does not resolve is refused too."""

from __future__ import annotations

import asyncio

import pytest

from corral.ssrf import refusal


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/hook", "http://localhost/", "http://[::1]/", "http://10.0.0.7/"]
)
def test_a_private_target_is_refused_naming_the_address_and_the_way_out(url: str) -> None:
    why = asyncio.run(refusal(url, allow_private=False))
    assert why is not None and "private address" in why and "webhooks.allow_private" in why


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hook", "http://localhost/"])
def test_allowing_private_targets_lets_them_through(url: str) -> None:
    assert asyncio.run(refusal(url, allow_private=True)) is None


def test_a_global_address_passes() -> None:
    assert asyncio.run(refusal("https://93.184.216.34/hook", allow_private=False)) is None


def test_a_bad_url_is_refused_even_when_private_targets_are_allowed() -> None:
    why = asyncio.run(refusal("ftp://127.0.0.1/", allow_private=True))
    assert why is not None and why.startswith("refused: the url")


def test_a_name_that_does_not_resolve_is_refused() -> None:
    why = asyncio.run(refusal("https://no-such-host.invalid/", allow_private=False))
    assert why is not None and "does not resolve" in why
