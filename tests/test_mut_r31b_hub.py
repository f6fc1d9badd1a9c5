"""Mutation round 31b: imgalign/hub.py's model_index_file for names that are no Hub id or whose file the cache marks
as missing, and the proxy and HF_ENDPOINT error lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.hub import PROXY_VARIABLES, hub_address_failure, model_index_file, proxy_failure

REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def online_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An empty Hub cache, the Hub reachable, and hf_hub_download recording the ids it is asked for (and failing)."""
    import huggingface_hub
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    asked: list[str] = []

    def download(repo_id: str, filename: str, **kwargs: object) -> str:
        asked.append(repo_id)
        raise OSError("no network in this test")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    return asked


@pytest.mark.parametrize("name", ["tiny-sd3", "runs/a/b", "./my-org/x", "/no/such/pipeline"])
def test_a_name_meant_as_a_local_path_is_not_asked_of_the_hub(name: str, online_cache: list[str]) -> None:
    """A bare name or a path of other than ORG/NAME is a local folder: its missing model_index.json is not fetched."""
    assert model_index_file(name) == Path(name) / "model_index.json"
    assert online_cache == []


def test_an_org_name_that_is_no_valid_hub_id_is_its_folder_s_path(online_cache: list[str]) -> None:
    """huggingface_hub refuses 'my org/x y' as a repo id (a ValueError): the folder's path, not that error."""
    assert model_index_file("my org/x y") == Path("my org/x y") / "model_index.json"
    assert online_cache == []


def test_a_model_index_the_cache_knows_is_missing_is_the_folder_s_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache's .no_exist marker (the Hub answered that the repo has no model_index.json): no cached file."""
    from huggingface_hub import constants

    repo = tmp_path / "hub" / "models--my-org--not-a-pipeline"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    (repo / ".no_exist" / REVISION).mkdir(parents=True)
    (repo / ".no_exist" / REVISION / "model_index.json").touch()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert model_index_file("my-org/not-a-pipeline") == Path("my-org/not-a-pipeline") / "model_index.json"


class ProxyError(Exception):
    """Named as huggingface_hub's HTTP client names it."""


class InvalidURL(Exception):
    """Named as the HTTP client names an address it cannot parse."""


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"])
def test_each_proxy_variable_is_named(variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, "http://user:secret@proxy.example:3128")
    msg = proxy_failure(ProxyError("407 Proxy Authentication Required"))
    assert msg is not None and f"through the proxy set in {variable} (407" in msg and "secret" not in msg


def test_a_proxy_error_of_several_lines_is_shown_by_its_first(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    msg = proxy_failure(ProxyError("\n  404 Not Found\nSecond line of the body\n"))
    assert msg is not None and "through the proxy (404 Not Found); fix" in msg and "Second line" not in msg


def test_an_invalid_url_without_hf_endpoint_names_the_hub_s_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    msg = hub_address_failure(InvalidURL("Invalid URL 'x'"))
    assert msg is not None
    assert msg.startswith(
        "the address of the Hugging Face Hub is not a URL the Hub can be asked at (Invalid URL"
    )
    assert hub_address_failure(RuntimeError("Invalid URL 'x'")) is None
