"""Bad-input round 34l: a proxy in the user's environment that refuses the Hub's requests."""

from __future__ import annotations

import sys

import pytest


def _proxy_error() -> type[Exception]:
    """The ProxyError of the HTTP client huggingface_hub uses (huggingface_hub raises it as it is)."""
    import huggingface_hub.file_download  # noqa: F401  (imports its HTTP client)

    for name in ("httpx2", "httpx"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "ProxyError"):
            return module.ProxyError
    pytest.skip("huggingface_hub's HTTP client has no ProxyError")


def _grid_failing_with(error: Exception, tmp_path, monkeypatch, capsys) -> str:
    """`imgalign grid` of the shapes model whose pipeline load raises `error` (as a Hub request would): exit 2, and
    the stderr it printed."""
    from diffusers import DiffusionPipeline

    from imgalign.cli import main

    def load(*args, **kwargs):
        raise error

    monkeypatch.setattr(DiffusionPipeline, "from_pretrained", load)
    argv = ["grid", "--model", "a=shapes", "--prompt", "a red circle", "--seeds", "1", "--steps", "1"]
    assert main([*argv, "--out", str(tmp_path / "g.png"), "--no-progress"]) == 2
    return capsys.readouterr().err


def test_a_proxy_that_refuses_the_hub_is_one_line_naming_the_variable(tmp_path, monkeypatch, capsys) -> None:
    """With HTTPS_PROXY set to a proxy that answers an error (404, 407 asking for a login) and HF_HUB_OFFLINE
    unset, loading a Hub id (even one already in the cache: huggingface_hub asks the Hub first) ended `eval`,
    `grid` and `score` with an httpx ProxyError traceback; a connection that failed outright gave a message."""
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.example:3128")
    err = _grid_failing_with(_proxy_error()("404 Not Found"), tmp_path, monkeypatch, capsys)
    assert "imgalign grid: error: the Hugging Face Hub could not be reached through the proxy" in err
    assert "set in HTTPS_PROXY (404 Not Found)" in err and "HF_HUB_OFFLINE=1" in err
    assert "secret" not in err and "Traceback" not in err


def test_other_errors_are_not_called_a_proxy_failure(monkeypatch) -> None:
    from imgalign.hub import proxy_failure

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert proxy_failure(RuntimeError("404 Not Found")) is None
    msg = proxy_failure(_proxy_error()("407 Proxy Authentication Required"))
    assert msg is not None and "through the proxy (407 Proxy Authentication Required)" in msg


def test_an_hf_endpoint_that_is_no_url_is_one_line_naming_it(tmp_path, monkeypatch, capsys) -> None:
    """HF_ENDPOINT=hf-mirror.com (a mirror's address without https://) ended every load of a Hub id, even a cached
    one, with an httpx UnsupportedProtocol traceback."""
    import huggingface_hub.file_download  # noqa: F401  (imports its HTTP client)

    client = next((sys.modules[n] for n in ("httpx2", "httpx") if n in sys.modules), None)
    if client is None or not hasattr(client, "UnsupportedProtocol"):
        pytest.skip("huggingface_hub's HTTP client has no UnsupportedProtocol")
    monkeypatch.setenv("HF_ENDPOINT", "hf-mirror.com")
    missing = client.UnsupportedProtocol("Request URL is missing an 'http://' or 'https://' protocol.")
    err = _grid_failing_with(missing, tmp_path, monkeypatch, capsys)
    assert "imgalign grid: error: HF_ENDPOINT='hf-mirror.com' is not a URL" in err
    assert "give it as https://HOST" in err and "Traceback" not in err
    assert not (tmp_path / "g.png").exists()
