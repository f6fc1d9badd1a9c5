"""imgalign.commands.rewards_cmd, mutation round 28 (helper e): nested hidden folders, and 'shapes' beside a folder
of that name."""

from __future__ import annotations

import pytest
from PIL import Image

from imgalign.cli import CLIError
from imgalign.commands import rewards_cmd


@pytest.mark.parametrize("inner", ["sub/.hidden", ".hidden/sub"])
def test_a_class_folder_below_a_hidden_folder_of_the_other_is_not_inside_it(tmp_path, inner) -> None:
    """Hidden folders are skipped at every depth when a folder is read, so a folder anywhere below one (or a hidden
    folder below a visible one) is not read with the outer class; a plain subfolder still is, and is refused."""
    outer = tmp_path / "real"
    (outer / inner).mkdir(parents=True)
    rewards_cmd._check_distinct(str(outer), "--real", str(outer / inner), "--fake")
    rewards_cmd._check_distinct(str(outer / inner), "--real", str(outer), "--fake")
    (outer / "plain" / "sub").mkdir(parents=True)
    with pytest.raises(CLIError, match="lies inside the --real folder"):
        rewards_cmd._check_distinct(str(outer), "--real", str(outer / "plain" / "sub"), "--fake")


def test_shapes_as_b_means_the_renders_even_beside_a_folder_named_shapes(tmp_path, monkeypatch) -> None:
    """'shapes' names the renders (64x64), not ./shapes: with stats features and a 32x32 folder as `a`, that
    folder is resized to the renders' size, not the renders (which cannot be) to the folder's."""
    monkeypatch.chdir(tmp_path)
    for name in ("shapes", "small"):
        (tmp_path / name).mkdir()
    for i in range(2):
        Image.new("RGB", (32, 32)).save(tmp_path / "small" / f"{i}.png")
        Image.new("RGB", (16, 16)).save(tmp_path / "shapes" / f"{i}.png")
    assert rewards_cmd._fd_resize("small", "shapes", "stats") == {"small": (64, 64)}
