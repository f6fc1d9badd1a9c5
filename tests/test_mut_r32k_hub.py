"""Mutation round 32k: imgalign/hub.py's _raised_as (an HTTP client's error class matched by name, subclasses
included) and _first_line (an error with no text is named by its class)."""

from __future__ import annotations

import pytest

from imgalign.hub import PROXY_VARIABLES, hub_address_failure, proxy_failure


class ProxyError(Exception):
    """Named as huggingface_hub's HTTP client names it."""


class UnsupportedProtocol(Exception):
    """Named as httpx names an address without a scheme."""


class ProxyRefused(ProxyError):
    """A subclass of the client's ProxyError, with a name of its own."""


class NoScheme(UnsupportedProtocol):
    """A subclass of httpx's UnsupportedProtocol, with a name of its own."""


@pytest.fixture
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)


def test_a_subclass_of_the_clients_error_is_recognised_by_its_base_name(no_proxy_variables: None) -> None:
    msg = proxy_failure(ProxyRefused("407 Proxy Authentication Required"))
    assert msg is not None and "through the proxy (407 Proxy Authentication Required)" in msg
    msg = hub_address_failure(NoScheme("Request URL is missing an 'http://' or 'https://' protocol."))
    assert msg is not None and msg.startswith("the address of the Hugging Face Hub is not a URL")


def test_an_error_without_text_is_named_by_its_class(no_proxy_variables: None) -> None:
    msg = proxy_failure(ProxyError())
    assert msg is not None and "through the proxy (ProxyError); fix" in msg
    msg = hub_address_failure(NoScheme("\n  \n"))
    assert msg is not None and "asked at (NoScheme); give it" in msg
