"""A head reward given a path that does not exist says what to give (round 28's A17: `artifact:model=CKPT` of a
training checkpoint said only "head file 'CKPT/head.safetensors' does not exist")."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.rewards.heads import load_head


@pytest.mark.parametrize(
    ("task", "said"),
    [
        (
            "artifact",
            "`imgalign rewards fit-artifact --out` wrote (or the folder `imgalign rewards build-shapes-",
        ),
        ("discriminator", "give the .safetensors file `imgalign rewards fit-discriminator --out` wrote"),
        (None, "give the .safetensors file `imgalign rewards fit-... --out` wrote"),
    ],
)
def test_a_missing_head_file_says_which_command_writes_one(
    tmp_path: Path, task: str | None, said: str
) -> None:
    missing = tmp_path / "run" / "checkpoints" / "step-000002" / "head.safetensors"
    with pytest.raises(FileNotFoundError, match="does not exist") as e:
        load_head(missing, task=task)
    assert said in str(e.value)
    assert (task == "artifact") == ("build-shapes-artifact" in str(e.value))


def test_the_artifact_reward_given_a_training_checkpoint_names_the_head_it_looked_for(tmp_path: Path) -> None:
    from imgalign.rewards.artifact import ArtifactReward

    (tmp_path / "step-000002").mkdir()
    with pytest.raises(FileNotFoundError) as e:
        ArtifactReward(model=str(tmp_path / "step-000002"))
    assert f"'{tmp_path / 'step-000002' / 'head.safetensors'}' does not exist" in str(e.value)
    assert "fit-artifact --out` wrote" in str(e.value)
