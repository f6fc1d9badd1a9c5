"""Bad-input round 29: odd YAML in training configs (`imgalign train CONFIG --print-config`) and the pretraining
config's --set."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main


@pytest.mark.parametrize("written, shown", [(".nan", "nan"), (".inf", "inf"), ("-.inf", "-inf")])
def test_a_non_finite_number_for_an_integer_key_is_named(
    written: str, shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`max_steps: .inf` (YAML's infinity) stopped `imgalign train` with an OverflowError traceback, and `.nan`
    said only "cannot convert float NaN to integer", naming no key. Each is refused naming the key."""
    p = tmp_path / "c.yaml"
    p.write_text(f"train:\n  max_steps: {written}\n")
    assert main(["train", str(p), "--print-config"]) == 2
    err = capsys.readouterr().err
    assert f"train.max_steps: expected an integer, got {shown}\n" in err and "Traceback" not in err
    # a whole float is still the integer it stands for
    p.write_text("train:\n  max_steps: 3.0\n")
    assert main(["train", str(p), "--print-config"]) == 0
    assert "\n  max_steps: 3\n" in capsys.readouterr().out


def test_a_non_finite_number_in_pretrain_set_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    """The same through --set of `world pretrain` (steps=.inf was an OverflowError traceback)."""
    assert main(["world", "pretrain", "--component", "clip", "--set", "steps=.inf", "--print-config"]) == 2
    assert "steps: expected an integer, got inf" in capsys.readouterr().err


def test_a_config_nested_too_deeply_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A config of thousands of nested brackets (a file pasted wrongly) stopped with PyYAML's RecursionError
    traceback; it is refused naming the file."""
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  max_steps: 1\nmodel: " + "[" * 5000 + "]" * 5000 + "\n")
    assert main(["train", str(p), "--print-config"]) == 2
    err = capsys.readouterr().err
    assert f"config file '{p}' nests lists or mappings too deeply to read" in err and "Traceback" not in err


@pytest.mark.parametrize("given, item", [("0,[3", "'[3'"), ("0,*x", "'*x'"), ("1,'a", '"\'a"')])
def test_a_comma_list_item_yaml_cannot_read_is_named(
    given: str, item: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--set sampling.tree.branch_steps=0,[3` (a list of numbers written with commas, one item an unclosed bracket
    or an alias) stopped with PyYAML's traceback; the item is named with the key."""
    assert main(["train", "--set", f"sampling.tree.branch_steps={given}", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert f"sampling.tree.branch_steps: item {item} of " in err and "Traceback" not in err
    assert main(["train", "--set", "sampling.tree.branch_steps=0,3", "--print-config"]) == 0
    assert "branch_steps:\n    - 0\n    - 3\n" in capsys.readouterr().out


def test_a_comma_list_item_in_a_config_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same in a file: `weights: "1, [2"`."""
    p = tmp_path / "c.yaml"
    p.write_text('rewards:\n  weights: "1, [2"\n')
    assert main(["train", str(p), "--print-config"]) == 2
    assert "rewards.weights: item '[2' of '1, [2' is not a value" in capsys.readouterr().err
