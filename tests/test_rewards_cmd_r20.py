"""Mutation round 20: `imgalign rewards` (imgalign/commands/rewards_cmd.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main


def _must_not_fit(*args: object, **kwargs: object) -> None:
    raise AssertionError("a head was fitted before the inputs were checked")


@pytest.mark.parametrize("blank", ["", " "])
def test_fit_discriminator_refuses_an_empty_fake_by_name(
    blank: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--fake ""` ("$FAKE" with FAKE unset) is Path('.'): with --real outside the current folder, every image
    under the current folder was fitted as the generated class. It is refused by name before any fit, as an
    empty --real is."""
    monkeypatch.setattr("imgalign.rewards.discriminator.fit_discriminator", _must_not_fit)
    real = tmp_path / "real"
    real.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = ["rewards", "fit-discriminator", "--real", str(real), "--fake", blank, "--features", "stats"]
    assert main([*argv, "--out", "h.safetensors"]) == 2
    assert "--fake is empty" in capsys.readouterr().err
    assert list(work.iterdir()) == []
