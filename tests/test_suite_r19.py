"""eval/suite.py, mutation round 19: the tests that killed its surviving mutants."""

from __future__ import annotations

from pathlib import Path

from imgalign.eval.suite import PromptFolder, short_prompt_folders


def _folders(counts: list[int]) -> list[PromptFolder]:
    return [
        PromptFolder(i, Path(f"{i:05d}"), {}, [Path(f"{j:04d}.png") for j in range(n)])
        for i, n in enumerate(counts)
    ]


def test_short_prompt_folders_names_three_and_counts_the_rest() -> None:
    """Folders holding as many images as the fullest one are not short; up to three short ones are named, more are
    counted ('and 1 more'), and exactly three get no 'and 0 more'."""
    assert short_prompt_folders(_folders([2, 2, 2])) == ""
    assert short_prompt_folders([]) == ""
    head = short_prompt_folders(_folders([4, 1, 4, 2, 0])).split(";")[0]
    assert (
        head
        == "3 of 5 prompt folders hold fewer images than the 4 of the others: 00001 (1), 00003 (2), 00004 (0)"
    )
    head = short_prompt_folders(_folders([4, 1, 3, 2, 0])).split(";")[0]
    assert head.endswith(": 00001 (1), 00002 (3), 00003 (2) and 1 more")
    assert head.startswith("4 of 5 prompt folders hold fewer images than the 4 of the others")
