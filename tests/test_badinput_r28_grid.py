"""Bad-input round 28: `imgalign grid --seeds` with an empty item between seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main


@pytest.mark.parametrize("seeds", ["0,,1", "0, ,1", "3,1,,,2"])
def test_grid_refuses_an_empty_seed_between_two_seeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seeds: str
) -> None:
    """`--seeds 0,$S,1` with S unset drew the columns of seeds 0 and 1 without a word, the seed asked for between
    them missing; refused before any model loads, naming the item."""
    out = tmp_path / "g.png"
    argv = ["grid", "--model", "a=shapes", "--prompt", "x", "--seeds", seeds, "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--seeds {seeds!r} has an empty item between two seeds (an unset shell variable?)" in err
    assert not out.exists()


def test_grid_seeds_keep_a_trailing_comma_and_spaces() -> None:
    from imgalign.commands.grid import parse_seeds

    assert parse_seeds("0,1,") == [0, 1]
    assert parse_seeds(",0,1") == [0, 1]
    assert parse_seeds(" 3 , 2 ") == [3, 2]
    with pytest.raises(ValueError, match="--seeds is empty"):
        parse_seeds(", ,")
