"""Bad-input round 24: odd image folders given to `imgalign rewards fit-discriminator`, `fit-artifact`, `fd` and
`fid-stats`."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from imgalign.cli import main
from tests.conftest import noise_pngs

torch.set_num_threads(1)


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
    folders = {"many": noise_pngs(tmp_path / "many", 3), "one": noise_pngs(tmp_path / "one", 1, seed=1)}
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


@pytest.mark.parametrize("command", ["fd", "fid-stats"])
def test_a_folder_named_shapes_in_the_working_folder_is_said_not_to_be_read(
    command: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """'shapes' means renders; a user's own folder ./shapes was passed over without a word (`fd shapes gen` gave the
    FD of gen to renders, 115 where the folder gave 0.04). The renders are still used, and the folder is named with
    how to read it."""
    monkeypatch.chdir(tmp_path)
    noise_pngs(tmp_path / "shapes", 3)
    gen = noise_pngs(tmp_path / "gen", 3, seed=1)
    argv = (
        ["fd", "shapes", str(gen)]
        if command == "fd"
        else ["fid-stats", "--images", "shapes", "--out", str(tmp_path / "s.safetensors")]
    )
    with caplog.at_level(logging.WARNING, logger="imgalign.commands.rewards_cmd"):
        assert main(["rewards", *argv, "--features", "stats", "--n", "4"]) == 0
    said = [r.getMessage() for r in caplog.records if r.name == "imgalign.commands.rewards_cmd"]
    flag = "fd argument" if command == "fd" else "--images"
    resized = [  # (fd in stats features: the renders are 64x64, gen's images 16x16)
        f"the images of 'shapes' are 64x64 and those of {str(gen)!r} 16x16: stats features depend on the image "
        f"size, so those of {str(gen)!r} are resized to 64x64 (bicubic) to compare the images, not their sizes"
    ]
    assert said == [
        f"{flag} 'shapes' means renders of the shapes world, not the folder named 'shapes' in this folder; to read "
        "that, give it as ./shapes"
    ] + (resized if command == "fd" else [])
    renders_out = capsys.readouterr().out
    caplog.clear()
    # ./shapes reads the folder, with nothing to say (whole: --n counts renders only)
    argv[argv.index("shapes")] = "./shapes"
    with caplog.at_level(logging.WARNING, logger="imgalign.commands.rewards_cmd"):
        assert main(["rewards", *argv, "--features", "stats"]) == 0
    assert not [r for r in caplog.records if r.name == "imgalign.commands.rewards_cmd"]
    if command == "fid-stats":  # 4 renders, then the folder's 3 images
        assert "(4 images," in renders_out and "(3 images," in capsys.readouterr().out
