"""Round 32 (helper g): ``imgalign.cli.main`` called from Python with the command as one string, or with a Path or a
number among its words."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main


def test_one_string_for_the_whole_command_is_refused_saying_to_give_a_list() -> None:
    """It was argparse's "invalid choice: 'r'" (the string read one character per word) and SystemExit 2."""
    with pytest.raises(
        TypeError,
        match=r"^main\(\) takes the command as a list of words, e\.g\. main\(\['rewards', 'list'\]\), not one "
        r"string \('rewards list'\); shlex\.split",
    ):
        main("rewards list")


def test_paths_and_numbers_among_the_words_are_their_text(tmp_path, capsys) -> None:
    """A Path item failed with "'PosixPath' object is not subscriptable"."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward/r/mean": 0.5}\n')
    assert main(["report", run, "--out", Path(tmp_path / "out")]) == 0
    assert (tmp_path / "out").is_dir()
    with pytest.raises(SystemExit):  # a number is a word too: `imgalign report 3` names no run folder
        main(["report", run, 3])


def test_a_word_of_another_type_is_refused_naming_it() -> None:
    with pytest.raises(
        TypeError, match=r"^main\(\): item 2 of the command is \{'a': 1\} \(dict\); give each word as"
    ):
        main(["rewards", "list", {"a": 1}])
