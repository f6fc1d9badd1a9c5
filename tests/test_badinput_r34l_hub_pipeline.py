"""Bad-input round 34l: a pipeline given by its Hub id, already in the local Hugging Face cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(sd3_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hub cache (HF_HUB_CACHE) holding `sd3_dir` as the snapshot of ``my-org/tiny-sd3``, SD3 saved without
    T5 (``text_encoder_3: [null, null]``) as the embedded model is, or a user's own pushed to the Hub."""
    from huggingface_hub import constants

    assert json.loads((sd3_dir / "model_index.json").read_text())["text_encoder_3"] == [None, None]
    cache = tmp_path / "hub"
    repo = cache / "models--my-org--tiny-sd3"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    (repo / "snapshots").mkdir()
    (repo / "snapshots" / REVISION).symlink_to(sd3_dir, target_is_directory=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_a_cached_hub_pipeline_is_read_from_the_cache(hub_cache: Path) -> None:
    """`imgalign train` with model.path a Hub id (examples/sd35m's stabilityai/stable-diffusion-3.5-medium) said
    "is not a diffusers pipeline folder (no model_index.json) ... or set model.family" though it was downloaded;
    `grid`/`eval --model` of a cached Hub pipeline saved without T5 failed with diffusers' "expected [...] but only
    [...] were passed"."""
    from imgalign.adapters import detect_family
    from imgalign.pipelines import absent_components

    assert detect_family("my-org/tiny-sd3") == "sd3"
    assert {"text_encoder_3", "tokenizer_3"} <= set(absent_components("my-org/tiny-sd3"))


def test_a_hub_id_not_in_the_cache_says_so(hub_cache: Path) -> None:
    from imgalign.adapters import detect_family
    from imgalign.pipelines import absent_components

    with pytest.raises(FileNotFoundError, match="'my-org/other' is no local folder") as info:
        detect_family("my-org/other")
    assert "hf download my-org/other" in str(info.value) and "model.family" in str(info.value)
    assert absent_components("my-org/other") == {}


def test_grid_loads_a_cached_hub_pipeline(hub_cache: Path, tmp_path: Path) -> None:
    from imgalign.cli import main

    out = tmp_path / "g.png"
    argv = [
        "grid",
        "--model",
        "a=my-org/tiny-sd3",
        "--prompt",
        "a red circle",
        "--seeds",
        "1",
        "--steps",
        "1",
    ]
    assert main([*argv, "--size", "32", "--out", str(out), "--no-progress"]) == 0
    assert out.is_file()


def test_online_a_hub_id_not_yet_downloaded_has_its_model_index_fetched(
    hub_cache: Path, sd3_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Online, `imgalign train` with examples/sd35m's model.path on a new machine (nothing downloaded yet) was
    refused as "not in the local Hugging Face cache" before diffusers' loader, which downloads it, ran: the one small
    model_index.json is fetched to read the family. A failed fetch (no network, a gated repo) keeps the message."""
    import huggingface_hub
    from huggingface_hub import constants

    from imgalign.adapters import detect_family

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    fetched = []

    def download(repo_id: str, filename: str, **kwargs: object) -> str:
        fetched.append((repo_id, filename))
        if repo_id != "my-org/new-sd3":
            raise OSError("401 Client Error: gated repo")
        return str(sd3_dir / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    assert detect_family("my-org/new-sd3") == "sd3"
    with pytest.raises(FileNotFoundError, match="'my-org/gated' is no local folder"):
        detect_family("my-org/gated")
    assert fetched == [("my-org/new-sd3", "model_index.json"), ("my-org/gated", "model_index.json")]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError, match="'my-org/other' is no local folder"):
        detect_family("my-org/other")
    assert len(fetched) == 2  # offline: the Hub is not asked
