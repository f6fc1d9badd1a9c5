"""Round 25 (second pass) mutants of trainers/testing.py: the contracts of the toy rewards, the stateful reward,
the plug-in objective and the config/file helpers that the training tests and benches build on. A helper that
drifted from its docstring here would let the tests built on it pass without checking what they claim."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from imgalign.config import ConfigError
from imgalign.trainers import testing as T

DEFAULT = str(Path(__file__).resolve().parents[1] / "examples" / "shapes" / "flow_grpo.yaml")


def _images(*rgb: tuple[float, float, float]) -> torch.Tensor:
    """One flat 4x4 image per (r, g, b), as a [B, 3, 4, 4] tensor."""
    return torch.tensor(rgb, dtype=torch.float32).view(-1, 3, 1, 1).expand(-1, 3, 4, 4).clone()


def test_the_toy_rewards_score_red_against_green_and_blue_and_blue_against_red() -> None:
    x = _images((0.8, 0.2, 0.4), (0.0, 1.0, 1.0))
    torch.testing.assert_close(T.red_reward(x, ["a", "b"]), torch.tensor([0.5, -1.0]))
    torch.testing.assert_close(T.blue_reward(x, ["a", "b"]), torch.tensor([-0.4, 1.0]))
    torch.testing.assert_close(T.brightness_reward(x, ["a", "b"]), torch.tensor([1.4 / 3, 2.0 / 3]))


def test_the_nan_reward_blanks_every_third_image_from_the_first() -> None:
    x = _images(*[(0.1 * i, 0.0, 0.0) for i in range(7)])
    r = T.nan_every_third_reward(x, [""] * 7)
    assert torch.isnan(r).tolist() == [True, False, False, True, False, False, True]
    torch.testing.assert_close(r[1], torch.tensor(0.1 / 3))


def test_the_running_mean_reward_subtracts_the_mean_brightness_of_every_image_it_was_updated_with() -> None:
    rw = T.RunningMeanReward()
    x = _images((0.3, 0.3, 0.3))
    assert rw.score(x, ["a"], None).scores.tolist() == pytest.approx([0.3])  # nothing seen yet: mean 0
    assert rw.update(_images((0.2, 0.2, 0.2), (0.6, 0.6, 0.6)), ["a", "b"]) == {"count": 2.0}
    assert rw.update(_images((1.0, 1.0, 1.0)), ["c"]) == {"count": 3.0}
    assert rw.score(x, ["a"], None).scores.tolist() == pytest.approx([0.3 - 0.6])


def test_the_running_mean_rewards_state_restores_its_mean_exactly() -> None:
    rw = T.RunningMeanReward()
    rw.update(_images((0.1, 0.1, 0.1), (0.2, 0.2, 0.2), (0.4, 0.4, 0.4)), ["a", "b", "c"])
    state = rw.state_dict()
    assert (
        state["total"].dtype == torch.float64 and state["total"].item() == rw.total
    )  # not rounded to float32
    again = T.RunningMeanReward()
    again.load_state_dict(state)
    assert (again.total, again.count) == (rw.total, 3)
    x = _images((0.5, 0.5, 0.5))
    assert torch.equal(again.score(x, ["a"], None).scores, rw.score(x, ["a"], None).scores)


def test_tree_sampling_is_two_validated_prompt_groups_per_step() -> None:
    s = T.tree_sampling(4, branch_steps=[0, 2], branch_factors=[2])
    assert (s.samples_per_step, s.prompts_per_step, s.rollout) == (8, 2, "tree")
    with pytest.raises(ConfigError, match="4 leaves per tree"):
        T.tree_sampling(2, branch_steps=[0, 2], branch_factors=[2])


def test_the_counting_objective_counts_its_updates_and_resumes_the_count() -> None:
    from imgalign.trainers.config import FlowGRPOConfig

    cfg = FlowGRPOConfig()
    obj = T.counting_grpo(cfg.objective, cfg.sampling)
    obj.after_update([])
    obj.after_update([])
    assert obj.state_dict() == {"updates": 2}
    again = T.counting_grpo(cfg.objective, cfg.sampling)
    again.load_state_dict({"updates": 5})
    again.after_update([])
    assert again.state_dict() == {"updates": 6}


def test_a_benchs_own_overrides_win_over_the_bench_defaults() -> None:
    cfg = T.bench_config(DEFAULT, ["log.sample_every=5", "eval.suite=reward"])
    assert cfg.log.sample_every == 5 and cfg.log.trackers == "none" and cfg.eval.suite == "reward"


def test_one_step_config_updates_a_section_keeping_its_other_settings(tmp_path: Path) -> None:
    cfg = T.one_step_config("m", tmp_path, sampling={"num_steps": 4}, prompts={"source": "p.txt"})
    assert cfg["sampling"] == {"num_steps": 4, "group_size": 2, "samples_per_step": 4, "batch_size": 4}
    assert cfg["prompts"] == {"source": "p.txt", "tasks": ["single_object", "colors"]}


def test_metric_rows_reads_every_row_and_transformer_weights_every_shard(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    assert T.metric_rows(tmp_path) == [{"step": 1}, {"step": 2}]
    (tmp_path / "transformer").mkdir()
    for i in (1, 2):
        save_file(
            {f"w{i}": torch.full((2,), float(i))},
            str(tmp_path / "transformer" / f"m-0000{i}-of-00002.safetensors"),
        )
    sd = T.transformer_weights(tmp_path)
    assert sorted(sd) == ["w1", "w2"] and sd["w2"].tolist() == [2.0, 2.0]
