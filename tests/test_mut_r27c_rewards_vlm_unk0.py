"""Mutation round 27 (rewards/vlm.py, survivor v4): <unk> stays out of the ids that end the scored prompt span also
where its id is 0, as in Llama-family tokenizers (LLaVA and others); a mutant `int(i) != int(unk or -1)` put id 0
among the stop ids, so a word the vocabulary lacks would have ended the scored prompt there."""

from __future__ import annotations

from pathlib import Path

import pytest
import test_rewards_vlm_families as fam

from imgalign.rewards.base import build_reward


def test_an_unk_token_of_id_0_does_not_end_the_scored_span(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vocab = {"<unk>": 0, **{t: i + 1 for t, i in fam.byte_vocab().items()}}
    monkeypatch.setattr(fam, "byte_vocab", lambda: vocab)
    folder = fam.make_tiny_gemma3(tmp_path / "gemma3")
    r = build_reward(f"vlm_loglik:model={folder}")
    assert r.tokenizer.unk_token_id == 0
    assert 0 not in r.stop_ids
    assert {r.tokenizer.eos_token_id, r.tokenizer.pad_token_id} <= r.stop_ids  # the other special ids stay
