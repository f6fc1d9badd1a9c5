"""`imgalign rewards fd` given an image where a stats file belongs, and `rewards check` given one reward twice
(own fixes, stop 57; left alone by bad-input round 24)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from imgalign.cli import main


def test_fd_given_an_image_file_names_it_and_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """It said "not an imgalign FID stats file: header too large" of a PNG."""
    folder = tmp_path / "a"
    folder.mkdir()
    for i in range(3):
        Image.new("RGB", (16, 16), (40 * i, 0, 0)).save(folder / f"{i}.png")
    assert main(["rewards", "fd", str(folder / "0.png"), str(folder), "--features", "stats"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{str(folder / '0.png')!r} is an image file; fd compares two image folders or stats files" in err
    assert f"give the folder that holds it ({str(folder)!r})" in err


@pytest.mark.parametrize(
    ("rewards", "said"),
    [
        (["clip", "clip"], "--reward 'clip' is given twice"),
        (["clip", "clip:model=shapes-clip"], "--reward 'clip:model=shapes-clip' is given as 'clip' does"),
    ],
)
def test_check_refuses_one_reward_given_twice_before_scoring(
    rewards: list[str], said: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import imgalign.rewards.base as base

    built: list[str] = []
    monkeypatch.setattr(base, "build_reward", lambda spec, **kw: built.append(spec))
    argv = ["rewards", "check", "--n", "2"]
    for r in rewards:
        argv += ["--reward", r]
    assert main(argv) == 2
    assert said in capsys.readouterr().err and built == []
