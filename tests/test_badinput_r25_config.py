"""Bad-input round 25: odd training configs and ``--set`` paths (`imgalign train --print-config`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.cli import main


@pytest.mark.parametrize("key", ["train..lr", ".lr", "train.lr.", "train.."])
def test_a_set_key_with_an_empty_part_is_named_as_such(key: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--set train..lr=1` said "unknown config key 'train.'" listing train's keys (lr among them), and `.lr=1`
    "unknown config key ''"; `train.lr.=1` said "'lr' is not a section". Each names the doubled or stray dot."""
    assert main(["train", "--set", f"{key}=1", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert f"override '{key}=1': the key '{key}' has an empty part between its dots" in err
    assert "e.g. train.lr=1e-4" in err and "Traceback" not in err


def test_spaces_around_a_set_key_part_are_dropped(capsys: pytest.CaptureFixture[str]) -> None:
    """`--set "train. lr=0.5"` said "unknown config key 'train. lr'; ... did you mean train.lr?"; the spaces
    around a part are dropped, as those around the whole key already were."""
    assert main(["train", "--set", "train. lr =0.5", "--print-config"]) == 0
    assert "\n  lr: 0.5\n" in capsys.readouterr().out


@pytest.mark.parametrize(
    "written, key, number",
    [
        ("train:\n  time_budget_min: 1:30\n", "train.time_budget_min", "90"),
        ("train:\n  max_steps: 1:00:00\n", "train.max_steps", "3600"),
        ("train:\n  lr: 1:30.5\n", "train.lr", "90.5"),
    ],
)
def test_a_base_60_number_in_a_config_file_is_refused(
    written: str, key: str, number: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """YAML 1.1 reads an unquoted 1:30 as the base-60 number 90: `time_budget_min: 1:30` (meant as one minute and
    a half, or an hour and a half) ran for 90 minutes without a word. It is refused naming the key and YAML's
    number; a str field still takes the text (log.output_dir: 12:30 is a folder named 12:30)."""
    p = tmp_path / "c.yaml"
    p.write_text(written)
    assert main(["train", str(p), "--print-config"]) == 2
    err = capsys.readouterr().err
    text = written.split(": ")[-1].strip()
    assert f"{key}: YAML reads {text} as the base-60 number {number}; write a plain number" in err
    p.write_text("log:\n  output_dir: 12:30\n")
    assert main(["train", str(p), "--print-config"]) == 0
    assert "output_dir: '12:30'" in capsys.readouterr().out


def test_a_base_60_number_in_set_is_refused_also_inside_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    """The same for `--set train.seed=1:00` (seed 60) and a list item (`rewards.weights=[1:30]`)."""
    assert main(["train", "--set", "train.seed=1:00", "--print-config"]) == 2
    assert "train.seed: YAML reads 1:00 as the base-60 number 60" in capsys.readouterr().err
    assert main(["train", "--set", "rewards.weights=[1:30]", "--print-config"]) == 2
    assert "rewards.weights[0]: YAML reads 1:30 as the base-60 number 90" in capsys.readouterr().err
    assert main(["train", "--set", "rewards.weights=[1.5]", "--print-config"]) == 0


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["train", "--set", "rewards.names=GenEval", "--print-config"],
            "unknown reward 'GenEval' (did you mean",
        ),
        (
            ["score", "IMAGES", "--reward", "genval", "--out", "OUT.jsonl"],
            "unknown reward 'genval' (did you mean",
        ),
        (
            ["grid", "--model", "a=shapes", "--prompt", "x", "--reward", "Clip", "--out", "OUT"],
            "'Clip' (did you",
        ),
        (
            ["score", "IMAGES", "--reward", "geneval:MODE=strict", "--out", "OUT.jsonl"],
            "MODE (did you mean 'mode'?)",
        ),
    ],
)
def test_a_misspelt_or_odd_cased_reward_or_option_name_gets_the_name_meant(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--reward GenEval` (as papers write it) or `genval` listed the six rewards and `geneval:MODE=strict` the
    three options, without saying which was meant; each now names it, in train, score and grid alike."""
    from PIL import Image

    (tmp_path / "images").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "images" / "a.png")
    argv = [
        str(tmp_path / "images")
        if a == "IMAGES"
        else str(tmp_path / a.replace("OUT", "o.png"))
        if "OUT" in a
        else a
        for a in argv
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    meant = "mode" if "MODE" in said else "clip" if "Clip" in said else "geneval"
    assert f"(did you mean {meant!r}?)" in err
    assert list(tmp_path.iterdir()) == [tmp_path / "images"]


def test_a_name_far_from_every_reward_gets_no_guess() -> None:
    from imgalign.rewards.base import did_you_mean

    assert did_you_mean("vlm", ["clip", "geneval", "vlm_loglik"]) == ""
    assert did_you_mean(" GENEVAL ", ["clip", "geneval"]) == " (did you mean 'geneval'?)"
