"""The launcher's WORLD_SIZE, when it is no process count, is refused naming it (round 24's note: int()'s
"invalid literal for int() with base 10: 'x'" named neither WORLD_SIZE nor what sets it)."""

from __future__ import annotations

import pytest

from imgalign.config import ConfigError
from imgalign.trainers.trainer import check_launch


@pytest.mark.parametrize("value", ["x", "0", "-2", "2.0", " 2"])
def test_a_world_size_that_is_no_process_count_is_refused_by_name(value: str) -> None:
    with pytest.raises(
        ConfigError, match=r"WORLD_SIZE=.* is not a process count \(a whole number >= 1\)"
    ) as e:
        check_launch(value, 1)
    assert repr(value) in str(e.value) and "unset it to train in one process" in str(e.value)


@pytest.mark.parametrize(("value", "processes"), [(None, 1), ("", 1), ("1", 1), ("3", 3)])
def test_an_unset_or_matching_world_size_goes_on(value: str | None, processes: int) -> None:
    check_launch(value, processes)


@pytest.mark.parametrize("value", ["x", "0"])
def test_print_config_refuses_it_as_the_run_does(
    value: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`train --print-config` took a bad WORLD_SIZE for 1 and showed the config as fine; the run then refused it."""
    from imgalign.cli import main

    monkeypatch.setenv("WORLD_SIZE", value)
    assert main(["train", "--print-config"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"imgalign train: error: WORLD_SIZE={value!r} is not a process count" in captured.err
