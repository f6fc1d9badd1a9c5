"""Mutation round 24: imgalign.plugins (a ``module:attr`` plug-in's one-line error raised naming it) and
imgalign.launch (the launcher's WORLD_SIZE and RANK), called directly (no model loads)."""

from __future__ import annotations

from typing import Any

import pytest

from imgalign.launch import launched_processes, launched_rank
from imgalign.plugins import call_plugin, raised_by_plugin


def _raises(error: Exception) -> Any:
    def fn(*args: Any, **kwargs: Any) -> Any:
        raise error

    return fn


def test_call_plugin_passes_positional_and_keyword_arguments() -> None:
    """A reward factory is called with keywords (device=, dtype=, its options): they reach it."""
    got = call_plugin("reward 'x'", "pkg.mod:make", lambda *a, **k: (a, k), 1, 2, device="cpu", mode="strict")
    assert got == ((1, 2), {"device": "cpu", "mode": "strict"})


@pytest.mark.parametrize("error", [ValueError("bad weights"), KeyError("clip_range"), OSError("no table")])
def test_a_plugins_one_line_error_is_raised_naming_the_description_with_the_original_as_its_cause(
    error: Exception,
) -> None:
    """The message names what the plug-in is (`what`, e.g. ``reward balancer 'pkg.mod:fn'``), not only the setting,
    and keeps the error as its cause (``imgalign -v`` shows the plug-in's traceback)."""
    with pytest.raises(ValueError) as e:
        call_plugin("reward balancer 'pkg.mod:fn'", "pkg.mod:fn", _raises(error))
    assert str(e.value).startswith(f"reward balancer 'pkg.mod:fn' raised {type(error).__name__}: ")
    assert str(e.value).endswith("; fix it there (imgalign -v ... shows its traceback)")
    assert e.value.__cause__ is error


def test_a_builtins_error_is_raised_as_it_is() -> None:
    """A registered (built-in) name has no ':': its own message already says what is wrong."""
    error = ValueError("gdpo needs two rewards")
    with pytest.raises(ValueError) as e:
        call_plugin("reward balancer 'gdpo'", "gdpo", _raises(error))
    assert e.value is error


def test_a_bare_key_error_of_a_plugin_is_named_too() -> None:
    """``raise KeyError()`` (no key) is a plug-in's error like any other: named, not an IndexError traceback from
    reading its missing key."""
    error = KeyError()
    with pytest.raises(ValueError, match=r"^objective 'pkg.mod:obj' raised KeyError") as e:
        call_plugin("objective 'pkg.mod:obj'", "pkg.mod:obj", _raises(error))
    assert e.value.__cause__ is error
    # with no text at all, it says so ("raised KeyError: ; fix it there" read as a cut message)
    for bare in (KeyError(), ValueError(), OSError()):
        said = str(raised_by_plugin("reward 'judge'", bare))
        assert said.startswith(f"reward 'judge' raised {type(bare).__name__}: (no message); fix it there"), (
            said
        )
    assert str(raised_by_plugin("reward 'judge'", KeyError("difficulty"), " (hint)")) == (
        "reward 'judge' raised KeyError: 'difficulty' (hint); fix it there (imgalign -v ... shows its traceback)"
    )


@pytest.mark.parametrize(
    ("value", "count"), [("1", 1), ("2", 2), ("16", 16), ("-2", None), (" 2", None), ("2.0", None)]
)
def test_launched_processes_takes_only_a_positive_whole_number(
    value: str, count: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", value)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # a node's share: not the process count
    if count is None:
        with pytest.raises(ValueError, match="is not a process count"):
            launched_processes()
    else:
        assert launched_processes() == count


@pytest.mark.parametrize(("value", "rank"), [(None, 0), ("", 0), ("0", 0), ("3", 3), ("12", 12)])
def test_launched_rank_is_the_global_rank(
    value: str | None, rank: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RANK is the process's global rank; LOCAL_RANK (its rank on its node) is 0 on every node's first process,
    which would make one printer per node."""
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "16")
    if value is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", value)
    assert launched_rank() == rank


@pytest.mark.parametrize("value", ["x", "-1", "1.0", " 1", "²"])
def test_a_rank_that_is_not_a_whole_number_is_refused_naming_rank(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RANK=x said only `invalid literal for int() with base 10: 'x'`, naming neither RANK nor what sets it, and
    RANK=-1 was taken for the main process."""
    monkeypatch.setenv("RANK", value)
    with pytest.raises(
        ValueError, match=rf"^RANK={value!r} is not a process rank \(a whole number >= 0\): the "
    ):
        launched_rank()


def test_print_config_names_a_bad_rank(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    from imgalign.cli import main

    config = str(Path(__file__).resolve().parents[1] / "examples" / "shapes" / "flow_grpo.yaml")
    monkeypatch.setenv("RANK", "x")
    assert main(["train", config, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "imgalign train: error: RANK='x' is not a process rank" in err, err
