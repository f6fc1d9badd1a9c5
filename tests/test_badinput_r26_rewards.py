"""Bad-input round 26: `imgalign rewards fid-stats`, `fit-discriminator` and `fit-artifact` given an --out that
already holds something else, and image folders of symlinks."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from imgalign.cli import main
from tests.conftest import noise_pngs

torch.set_num_threads(1)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _model_weights(path: Path) -> Path:
    """A safetensors file as a model's weights are saved: tensors, no imgalign metadata."""
    from safetensors.torch import save_file

    save_file({"w": torch.ones(3)}, str(path), metadata={"format": "pt"})
    return path


FIT = {
    "fid-stats": ["fid-stats", "--images", "{a}"],
    "fit-discriminator": ["fit-discriminator", "--real", "{a}", "--fake", "{b}", "--epochs", "2"],
    "fit-artifact": ["fit-artifact", "--clean", "{a}", "--artifact", "{b}", "--epochs", "2"],
}


def _run(command: str, out: Path, tmp_path: Path) -> int:
    folders = {"a": str(noise_pngs(tmp_path / "a", 3)), "b": str(noise_pngs(tmp_path / "b", 3, seed=1))}
    argv = [a.format(**folders) for a in FIT[command]]
    return main(["rewards", *argv, "--features", "stats", "--out", str(out)])


@pytest.mark.parametrize("command", sorted(FIT))
def test_an_out_holding_a_model_s_weights_is_not_replaced(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fid-stats --out model/model.safetensors` replaced a model's weights with the statistics without a word (as
    did a fit's head): an --out that holds a file imgalign did not write is refused, named, before any work."""

    def no_encoder(*args: object, **kwargs: object) -> None:
        raise AssertionError("a feature encoder was built before --out was checked")

    monkeypatch.setattr("imgalign.rewards.features.build_features", no_encoder)
    out = _model_weights(tmp_path / "model.safetensors")
    before = _digest(out)
    assert _run(command, out, tmp_path) == 2
    err = capsys.readouterr().err
    assert f"--out {str(out)!r} already holds a safetensors file imgalign did not write" in err, err
    assert "give a new file name, or delete that file first" in err
    assert _digest(out) == before
    notes = tmp_path / "notes.safetensors"
    notes.write_text("my notes")
    assert _run(command, notes, tmp_path) == 2
    assert "already holds a file that is not safetensors" in capsys.readouterr().err
    assert notes.read_text() == "my notes"


@pytest.mark.parametrize(
    ("writer", "command", "held"),
    [
        ("fid-stats", "fit-discriminator", "FID reference statistics (`imgalign rewards fid-stats`)"),
        (
            "fit-artifact",
            "fit-discriminator",
            "a head of the 'artifact' reward (`imgalign rewards fit-artifact`)",
        ),
        ("fit-discriminator", "fid-stats", "a head of the 'discriminator' reward"),
    ],
)
def test_an_out_holding_another_kind_of_result_is_not_replaced(
    writer: str, command: str, held: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A head written over FID statistics (or another reward's head, or statistics over a head) lost the earlier
    result; an earlier result of the same kind is replaced, as a fit run again replaces its head."""
    out = tmp_path / "result.safetensors"
    assert _run(writer, out, tmp_path) == 0
    before = _digest(out)
    capsys.readouterr()
    assert _run(command, out, tmp_path) == 2
    err = capsys.readouterr().err
    assert f"--out {str(out)!r} already holds {held}" in err, err
    assert _digest(out) == before
    assert _run(writer, out, tmp_path) == 0  # its own kind: run again
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(b"")  # (touched beforehand: nothing to lose)
    assert _run(command, empty, tmp_path) == 0 and empty.stat().st_size > 0


def test_build_shapes_artifact_does_not_replace_a_folder_s_own_readme_or_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`build-shapes-artifact --out .` in a project replaced its README.md with the model card (and a folder's
    head.safetensors with the head) without a word; such a folder is refused before the renders and the fit. The
    shipped model's folder (an earlier build) and an empty one are taken."""

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was built into a folder whose files it replaces")

    monkeypatch.setattr("imgalign.rewards.artifact.build_shapes_artifact", no_build)
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# my project\n")
    assert main(["rewards", "build-shapes-artifact", "--n", "2", "--out", str(project)]) == 2
    err = capsys.readouterr().err
    assert (
        f"--out {str(project)!r} already holds a README.md that is not the shapes artifact model's card"
        in err
    )
    assert (project / "README.md").read_text() == "# my project\n"
    weights = tmp_path / "weights"
    weights.mkdir()
    _model_weights(weights / "head.safetensors")
    assert main(["rewards", "build-shapes-artifact", "--n", "2", "--out", str(weights)]) == 2
    assert (
        "already holds head.safetensors (a safetensors file imgalign did not write" in capsys.readouterr().err
    )
    from imgalign.commands.rewards_cmd import artifact_folder_clash
    from imgalign.hub import ASSETS, EMBEDDED

    assert artifact_folder_clash(ASSETS / EMBEDDED["shapes-artifact"]) is None
    assert artifact_folder_clash(tmp_path / "new") is None


def test_a_folder_of_links_to_missing_images_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    """A folder of symlinks to images on a disk that is not mounted read as "0 readable images" (or as fewer images,
    when some links were good) without a word of the links; they are still left out, and named once."""
    from imgalign.rewards.io import find_images

    links = tmp_path / "links"
    links.mkdir()
    for i in range(3):
        (links / f"{i}.png").symlink_to(tmp_path / "unmounted" / f"{i}.png")
    with caplog.at_level("WARNING"):
        assert (
            main(["rewards", "fid-stats", "--images", str(links), "--out", str(tmp_path / "s.safetensors")])
            == 2
        )
    assert "holds 0 readable images" in capsys.readouterr().err
    said = [r.getMessage() for r in caplog.records if "symlink" in r.getMessage()]
    assert said == [
        f"skipped 3 symlink(s) under {links} whose target does not exist, e.g. {links / '0.png'} -> "
        f"{tmp_path / 'unmounted' / '0.png'}: restore or mount their targets, or remove the links"
    ]
    good = noise_pngs(tmp_path / "good", 1)
    (links / "ok.png").symlink_to(good / "000.png")
    (links / "2.png").unlink()
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert find_images([links]) == [links / "ok.png"]
        assert find_images([links]) == [links / "ok.png"]  # (a command walks its folder more than once)
    assert [r.getMessage().split(",")[0] for r in caplog.records] == [
        f"skipped 2 symlink(s) under {links} whose target does not exist"
    ]


@pytest.mark.parametrize("command", ["fd", "fid-stats"])
def test_n_without_shapes_is_refused_not_ignored(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fd gen ref --n 500` (or `fid-stats --images ref --n 500`) read the folders whole and gave the statistics of
    every image, without a word that --n counts the renders of 'shapes' only; it is refused before any encoder
    loads. With 'shapes' on either side it still counts the renders."""

    def no_encoder(*args: object, **kwargs: object) -> None:
        raise AssertionError("a feature encoder was built before --n was checked")

    monkeypatch.setattr("imgalign.rewards.features.build_features", no_encoder)
    a, b = str(noise_pngs(tmp_path / "a", 3)), str(noise_pngs(tmp_path / "b", 3, seed=1))
    out = str(tmp_path / "s.safetensors")
    argv = ["fd", a, b] if command == "fd" else ["fid-stats", "--images", a, "--out", out]
    assert main(["rewards", *argv, "--features", "stats", "--n", "5"]) == 2
    err = capsys.readouterr().err
    assert "--n 5 counts the renders of 'shapes', but " in err and "leave --n out" in err, err
    monkeypatch.undo()
    assert main(["rewards", *argv, "--features", "stats"]) == 0
    shapes = ["fd", a, "shapes"] if command == "fd" else ["fid-stats", "--images", "shapes", "--out", out]
    assert main(["rewards", *shapes, "--features", "stats", "--n", "5"]) == 0
