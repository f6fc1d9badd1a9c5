"""trainers/trainer.py, mutation round 28: what a resume restores, for behaviour no test pinned."""

from __future__ import annotations

from imgalign.cli import main
from imgalign.trainers.testing import metric_rows, one_step_config, write_config

# a plug-in reward that draws from torch's global RNG on every call (a sampled judge, a random crop)
RANDOM_REWARD = """
import torch


def noisy(images, prompts, metadata=None):
    return torch.rand(images.shape[0])
"""


def test_a_resume_restores_the_global_rng_a_reward_draws_from(sd3_dir, tmp_path, monkeypatch):
    """A reward drawing from torch's global RNG scores the resumed step 2 as the uninterrupted run does: the resume
    puts back the checkpoint's RNG state (setup's reseed alone would draw step 1's numbers again)."""
    (tmp_path / "r28j_noisy.py").write_text(RANDOM_REWARD)
    monkeypatch.syspath_prepend(str(tmp_path))
    rewards = {"names": ["r28j_noisy:noisy"]}
    ref = tmp_path / "ref"
    assert (
        main(
            [
                "train",
                str(write_config(one_step_config(sd3_dir, ref, rewards=rewards), tmp_path / "a.yaml")),
                "--max-steps",
                "2",
            ]
        )
        == 0
    )
    out = tmp_path / "cut"
    path = write_config(one_step_config(sd3_dir, out, rewards=rewards), tmp_path / "b.yaml")
    assert main(["train", str(path)]) == 0
    assert main(["train", str(path), "--resume", "auto", "--max-steps", "2"]) == 0
    key = "reward/noisy/mean"
    a, b = metric_rows(ref), metric_rows(out)
    assert a[0][key] != a[1][key]  # the reward draws anew each step
    assert [x[key] for x in a] == [x[key] for x in b]
