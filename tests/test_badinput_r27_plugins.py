"""Bad-input round 27: plug-in rewards, balancers, objectives and penalties (``module:attr``) whose own code raises the errors imgalign
prints as one line (ValueError, KeyError, OSError)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from imgalign.cli import main
from imgalign.rewards.base import build_reward
from imgalign.trainers.rewarding import score_all
from imgalign.trainers.testing import one_step_config, write_config

torch.set_num_threads(1)

HERE = "tests.test_badinput_r27_plugins"


def reads_tag(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    """A plug-in reward that reads a metadata key its prompts may not carry."""
    return torch.tensor([float(m["difficulty"]) for m in metadata])


def says_no(images: torch.Tensor, prompts: list[str], metadata: Any = None) -> torch.Tensor:
    raise ValueError("no")


def no_balance(*args: Any) -> Any:
    raise ValueError("weights do not sum to 1")


def no_objective(cfg: Any, sampling: Any) -> Any:
    raise KeyError("clip_range")


def no_penalty(v_theta: torch.Tensor, v_ref: torch.Tensor) -> torch.Tensor:
    raise OSError("cannot read my penalty's table")


def test_a_plugin_reward_s_key_error_names_the_reward_and_the_keys_it_was_given() -> None:
    """A plug-in reward that read a metadata key the prompts lack stopped training with `error: difficulty`: the
    key alone, naming neither the reward nor what went wrong. It is named now, with the keys the rows hold."""
    images = torch.rand(2, 3, 8, 8)
    rewards = {"judge": build_reward(f"{HERE}:reads_tag")}
    with pytest.raises(ValueError) as e:
        score_all(rewards, images, ["a", "b"], [{"tag": "x"}, {"tag": "y", "include": []}])
    assert str(e.value) == (
        "reward 'judge' raised KeyError: 'difficulty' (its prompts' metadata rows hold the keys ['include', 'tag']: "
        "a key it reads from them must be in every row); fix it there (imgalign -v ... shows its traceback)"
    )
    assert isinstance(e.value.__cause__, KeyError)
    with pytest.raises(
        ValueError, match=r"raised KeyError: 'difficulty' \(its prompts carry no metadata: give"
    ):
        score_all(rewards, images, ["a", "b"], [{}, {}])


def test_a_plugin_reward_s_value_error_names_the_reward_and_imgalign_s_own_checks_are_not_wrapped() -> None:
    images = torch.rand(2, 3, 8, 8)
    with pytest.raises(ValueError, match=r"^reward 'says_no' raised ValueError: no; fix it there"):
        score_all({"says_no": build_reward(f"{HERE}:says_no")}, images, ["a", "b"], [{}, {}])
    # imgalign's own message about what a reward was given already names it: raised as it is
    with pytest.raises(ValueError, match=r"^reward 'says_no': got 2 images but 1 prompts$"):
        score_all({"says_no": build_reward(f"{HERE}:says_no")}, images, ["a"], [{}, {}])


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (
            f"rewards.names=[{HERE}:reads_tag]",
            "imgalign train: error: reward 'reads_tag' raised KeyError: 'difficulty' (its prompts' metadata rows "
            "hold the keys [",
        ),
        (
            f"rewards.balancer={HERE}:no_balance",
            f"imgalign train: error: reward balancer '{HERE}:no_balance' raised ValueError: weights do not sum to "
            "1; fix it there (imgalign -v ... shows its traceback)",
        ),
        (
            f"objective.name={HERE}:no_objective",
            f"imgalign train: error: objective '{HERE}:no_objective' raised KeyError: 'clip_range'; fix it there",
        ),
        (
            f"objective.penalty={HERE}:no_penalty,objective.penalty_weight=1",
            f"imgalign train: error: objective.penalty '{HERE}:no_penalty' raised OSError: cannot read my "
            "penalty's table; fix it there",
        ),
    ],
)
def test_train_names_the_plugin_whose_own_code_failed(
    setting: str, said: str, sd3_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`imgalign train` with a plug-in reward, balancer, objective or velocity penalty whose code raised a KeyError,
    ValueError or OSError said only that error's text (`error: difficulty`, `error: weights do not sum to 1`,
    `error: clip_range`); the line names the plug-in now."""
    path = write_config(one_step_config(sd3_dir, tmp_path / "run"), tmp_path / "c.yaml")
    sets = [a for item in setting.split(",") for a in ("--set", item)]
    assert main(["train", str(path), *sets]) == 2
    err = capsys.readouterr().err
    assert said in err, err
    assert not list((tmp_path / "run").glob("checkpoints/step-*"))


def test_the_in_loop_reward_evaluation_names_a_plugin_reward_that_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The held-out prompts of the in-loop evaluation may carry other metadata than the training prompts: a plug-in
    reward's KeyError there said only the key, as in training."""
    from imgalign.trainers import evaluation
    from imgalign.trainers.config import EvalConfig

    monkeypatch.setattr(evaluation, "ode_sample", lambda a, m, ps, *rest: torch.rand(len(ps), 3, 8, 8))
    rewards = {"judge": build_reward(f"{HERE}:reads_tag")}
    prompts = [("a red circle", {"tag": "colors"}), ("a blue square", {"tag": "colors"})]
    with pytest.raises(
        ValueError,
        match=r"^reward 'judge' raised KeyError: 'difficulty' \(its prompts' metadata rows "
        r"hold the keys \['tag'\]",
    ):
        evaluation.reward_suite(None, None, EvalConfig(images_per_prompt=1), 1.0, rewards, prompts)  # type: ignore[arg-type]
    scored = {"judge": build_reward(f"{HERE}:reads_tag")}
    out, _ = evaluation.reward_suite(
        None,
        None,
        EvalConfig(images_per_prompt=1),
        1.0,
        scored,
        [("a", {"difficulty": 2})],  # type: ignore[arg-type]
    )
    assert out == {"eval/reward/judge/mean": 2.0}
