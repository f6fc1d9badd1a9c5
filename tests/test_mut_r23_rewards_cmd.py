"""Round 23 mutation tests of imgalign/commands/rewards_cmd.py."""

import pytest

from imgalign.cli import main


@pytest.mark.parametrize(
    ("second", "said"),
    [
        ("clipp", "unknown reward 'clipp' (did you mean 'clip'?)"),
        (
            "artifact",
            "artifact does not read the prompt, so it scores an image the same under the true and the",
        ),
    ],
)
def test_check_refuses_a_mistyped_or_prompt_free_later_reward_before_the_first_loads(
    second: str, said: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rewards check --reward clip --reward clipp` (or a second reward that reads no prompt) loaded clip and scored
    every pair (minutes) before the second --reward was refused; every --reward is checked before the first loads."""
    import imgalign.rewards.base as base

    monkeypatch.setattr(base, "build_reward", lambda *a, **k: pytest.fail("a reward's model loaded"))
    monkeypatch.setattr(
        "imgalign.rewards.sanity.true_vs_corrupted", lambda *a, **k: pytest.fail("a check ran")
    )
    assert main(["rewards", "check", "--reward", "geneval", "--reward", second, "--n", "4"]) == 2
    out = capsys.readouterr()
    assert said in out.err and not out.out
