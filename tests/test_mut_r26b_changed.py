"""Mutation round 26b (helper I): pins for code changed since 9dd0d74 that no test held (survivors in
/work/audit/s63/I/mutants.md)."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from imgalign import hub
from imgalign.cli import starting_interrupted
from imgalign.config import ConfigError
from imgalign.rewards.base import Reward, check_factory_options
from imgalign.rewards.fid import load_stats
from imgalign.rewards.io import other_files_note
from imgalign.trainers.checkpoint import unwritable
from imgalign.trainers.trainer import FlowGRPOTrainer
from imgalign.trainers.tree import _std_rows

IMAGES = torch.rand(2, 3, 8, 8)
PROMPTS = ["a red circle", "a blue square"]
STARTING = ": interrupted while starting, before it wrote anything"


@pytest.mark.parametrize(
    "argv, name",
    [
        (["world", "-v", "render"], "imgalign world"),
        (["rewards", "fid-stats", "images"], "imgalign rewards fid-stats"),
        (["rewards", "x.yaml"], "imgalign rewards"),
        (["score", "images.d/a"], "imgalign score"),
    ],
)
def test_ctrl_c_while_starting_names_at_most_a_group_and_its_subcommand(argv: list[str], name: str) -> None:
    """The name stops at the first word that is not a whole command word (a flag after the command, `x.yaml`, whose
    start `x` looks like one) and after two words: skipping a later flag, matching only a word's start, or a third
    word named `imgalign world render`, `imgalign rewards x.yaml` or `... fid-stats images`."""
    assert starting_interrupted(argv) == name + STARTING


def test_a_reward_class_returning_plain_text_scores_is_refused_by_name() -> None:
    """Scores returned as a plain list (no RewardOutput) of text: without the check, torch's own "too many
    dimensions 'str'" came out, naming neither the reward nor what to return."""

    class Text(Reward):
        name = "txt"

        def score(self, images: torch.Tensor, prompts: list[str], metadata: Any) -> Any:
            return ["0.25", "0.75"]

    with pytest.raises(ValueError, match=r"^reward 'txt' returned text \('0.25'\) among its scores"):
        Text()(IMAGES, PROMPTS)


def test_an_optional_option_is_not_read_as_a_list_of_choices() -> None:
    """Only a Literal annotation lists choices: reading any annotation's arguments as choices refused
    `scale=2.0` of `float | None` as "not one of float, NoneType"."""

    def judge(scale: float | None = None, **kwargs: object) -> None:
        """A plug-in reward factory."""

    check_factory_options("judge", judge, {"scale": 2.0})


def _stats(path: Path, sigma: torch.Tensor) -> Path:
    from safetensors.torch import save_file

    meta = {"kind": "imgalign-fid-stats", "features": "stats", "n": "10"}
    save_file({"mu": torch.zeros(sigma.shape[0], dtype=torch.float64), "sigma": sigma}, str(path), meta)
    return path


@pytest.mark.parametrize("scale", [1.0, 1e-7, 1e6])
def test_a_covariance_asymmetric_by_a_thousandth_is_refused_at_any_scale(
    tmp_path: Path, scale: float
) -> None:
    """The symmetry tolerance is relative (1e-5 of sigma's largest entry): an off-diagonal pair differing by 1e-3
    of it is refused at any scale of the features (an absolute 1e-5 let it through for small features and refused
    rounding of large ones; a 1e-2 tolerance let it through), and a rounding-sized difference loads."""
    sigma = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64) * scale
    bad = sigma.clone()
    bad[0, 1] += 2e-3 * scale
    with pytest.raises(ValueError, match=r"sigma is not symmetric"):
        load_stats(_stats(tmp_path / "bad.safetensors", bad))
    near = sigma.clone()
    near[0, 1] += 2e-9 * scale
    assert torch.equal(load_stats(_stats(tmp_path / "near.safetensors", near))[1], near)


def test_a_hidden_image_under_a_hidden_folder_is_named_by_its_path_in_the_folder(tmp_path: Path) -> None:
    """The hidden image named is its path in the folder given (`.cache/b.png`), which says why it is hidden; its
    bare name `b.png` does not."""
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "b.png").write_bytes(b"x")
    assert "it holds 1 hidden image(s), e.g. '.cache/b.png', skipped" in other_files_note(tmp_path)


def test_the_other_files_note_names_each_kind_of_suffix(tmp_path: Path) -> None:
    """Up to five suffixes are named, sorted (one was named where a folder held .heic and .txt files)."""
    for name in ("a.heic", "b.txt", "c"):
        (tmp_path / name).write_text("x")
    assert other_files_note(tmp_path).startswith(
        " (it holds 3 other file(s), e.g. 'a.heic': (no suffix), .heic, .txt;"
    )


UNRECOGNIZED = "Unrecognized model in {}. Should have a `model_type` key in its config.json."


@pytest.mark.parametrize(
    "config",
    ["{", "[]", json.dumps({"_class_name": "Custom", "model_type": "bert"})],
    ids=["not-json", "a-list", "diffusers-name-and-model-type"],
)
def test_a_config_json_that_says_nothing_of_another_library_keeps_the_librarys_reason(
    tmp_path: Path, config: str
) -> None:
    """A config.json that does not parse, is no mapping, or carries a model_type: the library's text is the reason
    (a JSON error or AttributeError came out of the error path, or a model_type config was called a diffusers part)."""
    (tmp_path / "config.json").write_text(config)
    reason = hub.load_error_reason(ValueError(UNRECOGNIZED.format(tmp_path)), str(tmp_path))
    assert reason == UNRECOGNIZED.format(tmp_path).rstrip(".")


def test_an_unrecognized_model_file_keeps_the_librarys_reason(tmp_path: Path) -> None:
    """A file, not a folder: it was not looked into as a folder ("it has no config.json" of a file)."""
    f = tmp_path / "model.bin"
    f.write_bytes(b"x")
    assert hub.load_error_reason(ValueError(UNRECOGNIZED.format(f)), str(f)) == UNRECOGNIZED.format(f).rstrip(
        "."
    )


@pytest.mark.parametrize("relative", ["ckpt", "out"])
def test_the_same_run_given_by_a_relative_path_asks_for_a_new_output_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relative: str
) -> None:
    """`--resume run/checkpoints/step-3` with `--output-dir /abs/run` (or the other way round) is the same run:
    comparing the unresolved path said "leave out --resume to start another run in run", the run resumed."""
    import yaml

    monkeypatch.chdir(tmp_path)
    ckpt = tmp_path / "run" / "checkpoints" / "step-000003"
    (ckpt / "trainer_state").mkdir(parents=True)
    (ckpt / "trainer_state" / "state.json").write_text(json.dumps({"step": 3, "num_processes": 1}))
    (ckpt / "trainer_state" / "config.yaml").write_text(yaml.safe_dump({"model": {"lora_rank": 2}}))
    rel = Path("run")
    tr = SimpleNamespace(
        resume_from=rel / "checkpoints" / "step-000003" if relative == "ckpt" else ckpt,
        world=1,
        out=rel if relative == "out" else tmp_path / "run",
        cfg=SimpleNamespace(model=SimpleNamespace(lora_rank=4)),
    )
    with pytest.raises(
        ConfigError, match=r"or leave out --resume and give a new --output-dir to start another run$"
    ):
        FlowGRPOTrainer._check_resume_fits(tr)


def test_a_std_that_varies_in_the_middle_of_a_row_is_refused() -> None:
    """Every entry of a row is compared with its first (comparing only the last entry let [0.5, 0.7, 0.5] pass,
    cut to 0.5)."""
    std = torch.full((2, 3), 0.5)
    std[1, 1] = 0.7
    with pytest.raises(ValueError, match=r"varies within a row"):
        _std_rows(std, 2, torch.device("cpu"))


def test_an_os_error_without_a_reason_asks_about_the_disk() -> None:
    """An OSError with no errno (a library's "unexpected pos") is most often a full disk: it was sent to check
    permissions ("mend that") when the errno check was dropped."""
    msg = str(unwritable(Path("/ckpt/state.pt"), OSError("unexpected pos 64")))
    assert "(OSError: unexpected pos 64): is the disk full" in msg and "free space and continue" in msg
    assert "mend that" in str(unwritable(Path("/c"), OSError(errno.EACCES, "Permission denied")))


def test_a_superscript_digit_world_size_is_refused_naming_it() -> None:
    """'²' is a digit to str.isdigit but no number to int(): read with isdigit, int()'s "invalid literal for int()"
    came out, naming neither WORLD_SIZE nor what sets it."""
    from imgalign.launch import world_size

    with pytest.raises(ValueError, match=r"^WORLD_SIZE='²' is not a process count"):
        world_size("²")
