"""Mutation round 27i: `imgalign report --compare` labels of spaces only."""

from __future__ import annotations

import pytest

from imgalign.cli import main


@pytest.mark.parametrize("item", ["=run", " =run", "\t=run"])
def test_a_compare_label_of_nothing_or_spaces_is_refused(
    item: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A label of spaces only is no label (stripped, it would be a group named '' in the legend)."""
    assert main(["report", "--compare", item, "--keys", "reward/r/mean", "--out", "o"]) == 2
    assert f"--compare takes LABEL=RUN[,RUN...], got {item!r}" in capsys.readouterr().err
