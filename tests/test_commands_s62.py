"""One reward given twice as --reward, however spelt, is refused naming both spellings."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import CLIError
from imgalign.commands import check_rewards_once


def test_a_file_option_given_by_two_paths_is_one_reward(tmp_path: Path) -> None:
    # score gave them two columns of the same scores
    a, b = f"clip:model={tmp_path}", f"clip:model={tmp_path / '.'}/"
    with pytest.raises(CLIError, match=r"is given as .* does \(the same reward and options\)"):
        check_rewards_once([a, b])


def test_the_same_spelling_twice_is_given_twice() -> None:
    with pytest.raises(CLIError, match=r"^--reward 'geneval' is given twice; give each reward once$"):
        check_rewards_once(["geneval", "geneval"])


def test_other_rewards_or_options_pass() -> None:
    check_rewards_once(["geneval", "geneval:mode=strict", "clip"])


@pytest.mark.parametrize("flag", ["--prompts", "--baseline"])
def test_score_names_a_prompt_or_baseline_file_that_is_no_regular_file(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--prompts /dev/null` said the file "does not exist"
    from PIL import Image

    from imgalign.cli import main

    Image.new("RGB", (16, 16)).save(tmp_path / "a.png")
    args = ["score", str(tmp_path / "a.png"), "--reward", "geneval", "--out", str(tmp_path / "s.jsonl")]
    assert main([*args, flag, "/dev/null"]) == 2
    assert "'/dev/null' is not a regular file" in capsys.readouterr().err
    assert not (tmp_path / "s.jsonl").exists()
