"""Bad-input round 24: odd image folders given to `imgalign rewards fit-discriminator`, `fit-artifact`, `fd` and
`fid-stats`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from imgalign.cli import main

torch.set_num_threads(1)


def _images(folder: Path, n: int, seed: int = 0) -> Path:
    """`n` random 16x16 RGB PNGs in `folder` (made)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        Image.fromarray((rng.random((16, 16, 3)) * 255).astype(np.uint8)).save(folder / f"{i:03d}.png")
    return folder


def _no_encoder(*args: object, **kwargs: object) -> None:
    raise AssertionError("a feature encoder was built before the folders were checked")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["fit-discriminator", "--real", "{many}", "--fake", "{one}"], "--fake '{one}' holds 1 image(s)"),
        (["fit-discriminator", "--real", "{none}", "--fake", "{many}"], "--real '{none}' holds 0 image(s)"),
        (["fit-artifact", "--clean", "{many}", "--artifact", "{one}"], "--artifact '{one}' holds 1 image(s)"),
        (["fd", "{many}", "{one}"], "'{one}' holds 1 readable image;"),
        (["fid-stats", "--images", "{one}"], "--images '{one}' holds 1 readable image;"),
    ],
    ids=["fit-discriminator-fake", "fit-discriminator-real", "fit-artifact", "fd", "fid-stats"],
)
def test_a_folder_of_fewer_than_two_images_is_refused_before_any_encoder_loads(
    argv: list[str],
    named: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A class folder (or an fd / fid-stats folder) of one image was refused only once it was read: after the
    encoder had loaded and the other folder's images were all encoded (minutes for a reference folder). Its image
    files are now counted first; a folder of other files names them."""
    monkeypatch.setattr("imgalign.rewards.features.build_features", _no_encoder)
    folders = {"many": _images(tmp_path / "many", 3), "one": _images(tmp_path / "one", 1, seed=1)}
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "notes.txt").write_text("x")
    folders["none"] = tmp_path / "none"
    out = tmp_path / "out.safetensors"
    names = {k: str(v) for k, v in folders.items()}
    given = [a.format(**names) for a in argv]
    extra = [] if given[0] == "fd" else ["--out", str(out)]
    assert main(["rewards", *given, "--features", "stats", *extra]) == 2
    err = capsys.readouterr().err
    assert named.format(**names) in err, err
    assert "\n" not in err.strip() and not out.exists()
    if "{none}" in argv:  # the files it does hold are named
        assert "it holds 1 other file(s), e.g. 'notes.txt'" in err
