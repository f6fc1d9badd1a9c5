"""The launcher's gradient-accumulation setting that accelerate cannot read is refused naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main
from imgalign.trainers.trainer import check_accumulation_env


@pytest.mark.parametrize("value", ["abc", "2.5", "", "1e3"])
def test_an_accumulation_that_is_not_a_whole_number_is_refused_naming_it(value: str) -> None:
    with pytest.raises(
        ValueError, match=rf"ACCELERATE_GRADIENT_ACCUMULATION_STEPS={value!r} is not a whole number"
    ):
        check_accumulation_env(value)


@pytest.mark.parametrize("value", [None, "1", " 1", "-1", "0", "4"])
def test_a_whole_number_is_left_to_the_launch_check(value: str | None) -> None:
    check_accumulation_env(value)  # 0, -1 and 4 are refused by check_accelerator, with what to do


def test_train_refuses_it_before_it_writes_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # it was "imgalign train: error: invalid literal for int() with base 10: 'abc'"
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "abc")
    out = tmp_path / "run"
    assert main(["train", "--max-steps", "1", "--output-dir", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "ACCELERATE_GRADIENT_ACCUMULATION_STEPS='abc' is not a whole number" in err, err
    assert not out.exists()
