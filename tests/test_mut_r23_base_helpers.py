"""rewards.base helpers (excerpt, reward specs and options) at the edges round 23's mutants left open."""

from __future__ import annotations

from imgalign.rewards.base import excerpt


def test_a_text_exactly_as_wide_as_the_cut_is_kept_whole() -> None:
    """A prompt of exactly `width` characters fits: it is kept as it is, not cut to " ..." (B35)."""
    assert excerpt("abcdefghij", 10) == "abcdefghij"
    assert excerpt("abcd fghij", 10) == "abcd fghij"
    assert excerpt("abcdefghijk", 10) == "abcdef ..."


def test_a_space_in_the_first_half_of_the_cut_is_not_cut_at() -> None:
    """Cutting at a space that leaves less than half the room would throw most of the text away: the cut falls
    mid-word instead (B38)."""
    assert excerpt("ab cdefghijklmnop", 10) == "ab cde ..."
    assert excerpt("abcd efghijklmnop", 10) == "abcd ..."


def test_a_keyword_argument_overrides_the_same_option_in_the_spec(monkeypatch) -> None:
    """build_reward("mod:fn:scale=2", scale=3): the caller's keyword argument wins over the spec's text (a config
    or command line sets it on top of a spec) (B54)."""
    import sys
    import types

    import torch

    from imgalign.rewards.base import build_reward

    def scaled(images, prompts, metadata, scale=1.0):
        return images.mean(dim=(1, 2, 3)) * scale

    mod = types.ModuleType("my_lab_r23.scores")
    mod.scaled = scaled
    monkeypatch.setitem(sys.modules, "my_lab_r23.scores", mod)
    reward = build_reward("my_lab_r23.scores:scaled:scale=2", scale=3)
    assert reward.opts == {"scale": 3}
    torch.testing.assert_close(reward(torch.full((1, 3, 2, 2), 0.5), [""]).scores, torch.tensor([1.5]))


def test_one_reference_folder_named_two_ways_is_one_reward(tmp_path, monkeypatch) -> None:
    """same_reward_key resolves folders as it does files: ``ref=pool`` and ``ref=./x/../pool`` are one reward (B80)."""
    from imgalign.rewards.base import same_reward_key

    (tmp_path / "pool").mkdir()
    (tmp_path / "x").mkdir()
    monkeypatch.chdir(tmp_path)
    key = same_reward_key("discriminator:ref=pool")
    assert key == same_reward_key("discriminator:ref=./x/../pool") == f"discriminator:ref={tmp_path / 'pool'}"
