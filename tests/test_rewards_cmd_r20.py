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


def test_fd_takes_a_stats_file_whose_encoder_folder_is_named_another_way(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stats file records its encoder folder as an absolute path; `fd FILE ... --features dinov2:models/dino`
    (the same folder, relative) is the same encoder and is compared, not refused as other statistics. The encoder
    is stood in for by 'stats' (no model loads)."""
    import imgalign.rewards.features as F
    from imgalign.rewards.fid import save_stats, shapes_reference_images, stats_of

    real = F.build_features
    monkeypatch.setattr(F, "build_features", lambda name, device="cpu": real("stats", device))
    (tmp_path / "models" / "dino").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    mu, sigma = stats_of(real("stats")(shapes_reference_images(4, seed=5)))
    save_stats(tmp_path / "ref.safetensors", mu, sigma, 4, f"dinov2:{tmp_path / 'models' / 'dino'}")
    argv = ["rewards", "fd", "ref.safetensors", "shapes", "--features", "dinov2:models/dino", "--n", "4"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "FD(ref.safetensors, shapes) in dinov2:models/dino features:" in capsys.readouterr().out
