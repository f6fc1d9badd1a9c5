"""Round 25 mutation survivors of imgalign/sampling.py (round 24's S27, S29, S31, S33): generate_folder loads a
named model on its device, names it in its warnings, resumes from the folders it wrote, and shows its progress
bar only when asked."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from PIL import Image

from imgalign.sampling import generate_folder

_METAS = [
    {"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat"},
    {"tag": "single_object", "include": [{"class": "dog", "count": 1}], "prompt": "a photo of a dog"},
]


class _SchnellPipe:
    """A pipeline stand-in whose transformer has no guidance embedding (a FLUX.1-schnell-like model)."""

    transformer = SimpleNamespace(config=SimpleNamespace(guidance_embeds=False))

    def __call__(self, prompt: list[str], **kwargs: Any) -> None:
        pass


class _Sampler:
    """A `sample` function that counts the prompts it is asked for and gives 8-pixel images."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def __call__(self, pipe: Any, prompts: list[str], seeds: list[int], **settings: Any) -> list[Image.Image]:
        self.prompts += prompts
        return [Image.new("RGB", (8, 8)) for _ in prompts]


def test_a_named_model_is_loaded_on_the_device_asked_for_and_named_in_the_guidance_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    loaded: list[tuple[Any, Any]] = []

    def load_pipeline(model: Any, device: Any = "cpu", **kwargs: Any) -> _SchnellPipe:
        loaded.append((model, device))
        return _SchnellPipe()

    monkeypatch.setattr("imgalign.sampling.load_pipeline", load_pipeline)
    model, out = tmp_path / "my-schnell", tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="imgalign.sampling"):
        generate_folder(
            model, _METAS, out, 1, 0, progress=False, sample=_Sampler(), device="cuda:1", guidance=3.5
        )
    assert loaded == [(model, "cuda:1")]
    (line,) = [r.getMessage() for r in caplog.records if r.name == "imgalign.sampling"]
    assert line.startswith(f"{model} has no guidance embedding") and "guidance scale 3.5" in line


def test_a_second_run_into_the_same_folder_samples_nothing_again(tmp_path: Path) -> None:
    first, second = _Sampler(), _Sampler()
    generate_folder(_SchnellPipe(), _METAS, tmp_path, 2, 0, progress=False, sample=first)
    assert sorted((tmp_path / "00001" / "samples").iterdir()) == [
        tmp_path / "00001" / "samples" / "0000.png",
        tmp_path / "00001" / "samples" / "0001.png",
    ]
    generate_folder(_SchnellPipe(), _METAS, tmp_path, 2, 0, progress=False, sample=second)
    assert (len(first.prompts), second.prompts) == (4, [])


@pytest.mark.parametrize("progress", [True, False])
def test_the_progress_bar_is_shown_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], progress: bool
) -> None:
    generate_folder(_SchnellPipe(), _METAS, tmp_path, 1, 0, progress=progress, sample=_Sampler())
    err = capsys.readouterr().err
    assert ("sampling" in err and "2/2" in err) is progress
