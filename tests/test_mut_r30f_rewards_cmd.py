"""imgalign/commands/rewards_cmd.py's small checks, pinned where round 30f's mutants survived: the count of a
folder with too few images as the refusal spells it, and the 'shapes' warning only where a path of that name
exists."""

from __future__ import annotations

import logging

import pytest

from imgalign.cli import CLIError
from imgalign.commands.rewards_cmd import _check_image_files, _warn_if_shapes_is_a_path


@pytest.mark.parametrize(
    ("noun", "n", "spelt"),
    [
        ("image(s)", 0, "holds 0 image(s); "),
        ("image(s)", 1, "holds 1 image(s); "),
        ("readable image", 0, "holds 0 readable images; "),
        ("readable image", 1, "holds 1 readable image; "),
    ],
)
def test_too_few_images_are_counted_with_the_noun_as_given_or_made_plural(noun, n, spelt, tmp_path):
    """A noun already spelt '(s)' is used as it is ('0 image(s)s' was one mutant's); another is made plural."""
    from PIL import Image

    for i in range(n):
        Image.new("RGB", (4, 4)).save(tmp_path / f"{i}.png")
    with pytest.raises(CLIError) as err:
        _check_image_files(str(tmp_path), "--real 'x'", "a head needs 2", noun)
    assert f"--real 'x' {spelt}a head needs 2" == str(err.value)


def test_shapes_is_said_not_to_be_a_path_only_where_one_of_that_name_exists(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="imgalign.commands.rewards_cmd"):
        _warn_if_shapes_is_a_path("shapes", "fd's first set")
    assert caplog.text == ""  # no ./shapes: nothing to say
    (tmp_path / "shapes").mkdir()
    with caplog.at_level(logging.WARNING, logger="imgalign.commands.rewards_cmd"):
        _warn_if_shapes_is_a_path("shapes", "fd's first set")
    assert (
        "fd's first set 'shapes' means renders of the shapes world, not the folder named 'shapes'"
        in caplog.text
    )


class _EncoderBuilt(Exception):
    """Raised in place of building a feature encoder: every check before it has passed."""


def _encoder_built(*args: object, **kwargs: object) -> None:
    raise _EncoderBuilt


def test_fd_checks_its_second_argument_before_any_encoder_loads(tmp_path, monkeypatch, capsys):
    """`fd FOLDER IMAGE.png`: the second argument is refused as an image file before the encoder is built, as the
    first one is."""
    from imgalign.cli import main
    from tests.conftest import noise_pngs

    monkeypatch.setattr("imgalign.rewards.features.build_features", _encoder_built)
    folder = noise_pngs(tmp_path / "gen", 3)
    image = sorted(folder.iterdir())[0]
    assert main(["rewards", "fd", str(folder), str(image), "--features", "stats"]) == 2
    assert f"{str(image)!r} is an image file" in capsys.readouterr().err


def test_fd_of_shapes_is_not_refused_for_a_folder_named_shapes_of_one_image(tmp_path, monkeypatch):
    """'shapes' is the renders: a ./shapes folder of one image (not read) is no reason to refuse `fd shapes gen`."""
    from imgalign.cli import main
    from tests.conftest import noise_pngs

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("imgalign.rewards.features.build_features", _encoder_built)
    noise_pngs(tmp_path / "shapes", 1)
    gen = noise_pngs(tmp_path / "gen", 3, seed=1)
    with pytest.raises(_EncoderBuilt):
        main(["rewards", "fd", "shapes", str(gen), "--features", "stats"])
