"""Bad-input round 31: `imgalign rewards fd` of two folders whose images differ in size."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_badinput_r31h_fid_sizes import _folders

from imgalign.cli import main


def _fd(capsys: pytest.CaptureFixture[str], *args: str) -> float:
    assert main(["rewards", "fd", *args, "--features", "stats"]) == 0
    return float(re.search(r"features: (\S+)", capsys.readouterr().out).group(1))


def test_stats_features_compare_the_images_not_their_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The same images at 32x32 and (downscaled) at 16x16 were far apart in `stats` features, which depend on the
    image size, further than another set of the same kind, without a word: the second folder is read at the
    first's size, as fit-discriminator and fit-artifact read theirs, and the warning says so."""
    small, large, other = _folders(tmp_path)
    with caplog.at_level("WARNING"):
        same = _fd(capsys, str(small), str(large))
    assert same < 1e-3 < _fd(capsys, str(small), str(other))  # the same images, at one size
    said = [r.getMessage() for r in caplog.records if "depend on the image size" in r.getMessage()]
    assert said == [
        f"the images of {str(small)!r} are 16x16 and those of {str(large)!r} 32x32: stats features depend on the "
        f"image size, so those of {str(large)!r} are resized to 16x16 (bicubic) to compare the images, not their "
        "sizes"
    ]
    caplog.clear()
    with caplog.at_level("WARNING"):  # one size: nothing said, nothing resized
        _fd(capsys, str(small), str(other))
    assert not [r for r in caplog.records if "depend on the image size" in r.getMessage()]


def test_a_stats_file_with_a_recorded_size_has_the_folder_beside_it_read_at_that_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """`fid-stats` records the images' size; `rewards fd STATS FOLDER` read the folder at its own size beside it
    (the recorded size was used only by the fid reward). The folder is read at the file's size, on either side;
    two stats files of different sizes cannot be resized, and the warning says the FD measures the sizes too."""
    small, large, _ = _folders(tmp_path)
    stats16, stats32 = tmp_path / "s16.safetensors", tmp_path / "s32.safetensors"
    for folder, out in ((small, stats16), (large, stats32)):
        assert (
            main(["rewards", "fid-stats", "--images", str(folder), "--features", "stats", "--out", str(out)])
            == 0
        )
    capsys.readouterr()
    with caplog.at_level("WARNING"):
        assert _fd(capsys, str(stats16), str(large)) < 1e-3  # was: the sizes measured (the folder at 32x32)
        assert _fd(capsys, str(large), str(stats16)) < 1e-3
    said = [r.getMessage() for r in caplog.records if "depend on the image size" in r.getMessage()]
    assert len(said) == 2 and all(f"those of {str(large)!r} are resized to 16x16" in m for m in said)
    caplog.clear()
    with caplog.at_level("WARNING"):
        _fd(capsys, str(stats16), str(stats32))
    assert f"the statistics of {str(stats16)!r} are of 16x16 images" in caplog.text
    assert "the FD measures the sizes too; compute both at one size" in caplog.text
