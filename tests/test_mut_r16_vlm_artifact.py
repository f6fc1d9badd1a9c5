"""Mutation round 16: behaviour of the vlm_loglik reward (rewards/vlm.py) and the artifact reward
(rewards/artifact.py) that no test checked before."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

import imgalign.rewards.vlm as vlm
from imgalign.hub import embedded_path
from imgalign.rewards.vlm import VLMLogLikReward, load_vlm

torch.set_num_threads(1)


def shapes_vlm() -> tuple[Any, Any]:
    """A fresh (model, processor) of the shipped shapes VLM (the tests below edit them)."""
    return load_vlm("shapes-vlm", torch.device("cpu"), torch.float32)


def reward_on(monkeypatch: pytest.MonkeyPatch, model: Any, processor: Any, **options: Any) -> VLMLogLikReward:
    """A vlm_loglik reward built around the given model and processor (load_vlm replaced)."""
    monkeypatch.setattr(vlm, "load_vlm", lambda *a, **k: (model, processor))
    return VLMLogLikReward(model="shapes-vlm", **options)


# ---- vlm.py ---------------------------------------------------------------------------------------------------
def test_a_vlm_folder_loads_in_the_asked_dtype_on_the_asked_device() -> None:
    """A save_pretrained folder is loaded with the reward's dtype and moved to its device (meta: no memory)."""
    model, _ = load_vlm(str(embedded_path("shapes-vlm")), torch.device("meta"), torch.bfloat16)
    params = list(model.parameters())
    assert {p.dtype for p in params} == {torch.bfloat16}
    assert {p.device.type for p in params} == {"meta"}


def test_trust_remote_code_reads_the_strings_true_and_false(monkeypatch: pytest.MonkeyPatch) -> None:
    """trust_remote_code="false" (a string, as a config file may give it) is False, not a truthy string; any other
    text is refused by name."""
    seen: list[bool] = []
    model, proc = shapes_vlm()

    def load(name: str, device: torch.device, dtype: torch.dtype, trust: bool = False) -> tuple[Any, Any]:
        seen.append(trust)
        return model, proc

    monkeypatch.setattr(vlm, "load_vlm", load)
    VLMLogLikReward(trust_remote_code="false")
    VLMLogLikReward(trust_remote_code="True")
    assert seen == [False, True]
    with pytest.raises(ValueError, match="trust_remote_code must be true or false, got 'maybe'"):
        VLMLogLikReward(trust_remote_code="maybe")


def test_no_query_is_an_empty_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """query=None (an option left empty) adds no text to the user turn: the same messages as the default."""
    model, proc = shapes_vlm()
    r = reward_on(monkeypatch, model, proc, query=None)
    assert r.query == ""
    assert r._messages("a cross")[0] == {"role": "user", "content": [{"type": "image"}]}


def test_a_position_limit_of_0_is_no_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """max_position_embeddings 0 (or missing) means the limit is unknown: nothing is warned about."""
    model, proc = shapes_vlm()
    model.config.get_text_config().max_position_embeddings = 0
    assert reward_on(monkeypatch, model, proc).max_positions is None


def test_a_tokenizer_that_only_adds_bos_has_no_vocabulary(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vocabulary check tokenizes without special tokens: a Llama-style tokenizer without its vocabulary still
    adds BOS, which is not a word."""
    model, _ = shapes_vlm()

    class BosOnly:
        chat_template = "{{ messages }}"

        def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
            return {"input_ids": [1] if add_special_tokens else []}

    with pytest.raises(ValueError, match="turns text into no tokens: it has no vocabulary"):
        reward_on(monkeypatch, model, BosOnly())


def test_a_sequence_of_exactly_the_models_positions_is_not_warned_and_one_more_is(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The limit counts the sample's real tokens (padding excluded): a sequence of exactly max_position_embeddings
    tokens fits; one token more is warned about, with its length."""
    from imgalign.rewards.base import to_pil

    model, proc = shapes_vlm()
    r = reward_on(monkeypatch, model, proc)
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    prompts = ["a red circle", "a red circle above a blue square"]
    enc, _ = r.teacher_forced_inputs(prompts, to_pil(x))
    short, long = enc["attention_mask"].sum(1).tolist()
    assert short < long == enc["input_ids"].shape[1]
    with caplog.at_level("WARNING", logger="imgalign.rewards.vlm"):
        r.max_positions = long
        r(x, prompts)
        assert not [rec for rec in caplog.records if rec.name == "imgalign.rewards.vlm"]
        r.max_positions = long - 1
        r(x, prompts)
    (msg,) = [rec.getMessage() for rec in caplog.records if rec.name == "imgalign.rewards.vlm"]
    assert f"takes {long} tokens, more than the model's {long - 1} positions" in msg
    assert msg.endswith("e.g. 'a red circle above a blue square'")


def test_a_bfloat16_reward_scores_with_its_images_in_bfloat16() -> None:
    """dtype=bfloat16: the model gets the processor's float32 pixel values cast to its dtype (the shipped families
    cast them themselves, remote code need not); each detail has one log-prob per scored token."""
    from imgalign.rewards.base import build_reward

    r = build_reward("vlm_loglik", dtype=torch.bfloat16)
    assert next(r.model.parameters()).dtype == torch.bfloat16
    seen: list[torch.dtype] = []
    r.model.register_forward_pre_hook(
        lambda _m, _a, kwargs: seen.append(kwargs["pixel_values"].dtype), with_kwargs=True
    )
    prompts = ["a red circle", "two blue squares above a cross"]
    out = r(torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)), prompts)
    assert seen == [torch.bfloat16]
    assert torch.isfinite(out.scores).all() and out.scores.dtype == torch.float32
    for d in out.details:
        assert len(d["token_logprobs"]) == len(d["tokens"]) > 1
        assert all(lp < 0 for lp in d["token_logprobs"])


# ---- artifact.py ----------------------------------------------------------------------------------------------
def unchanged_fraction(x: torch.Tensor, y: torch.Tensor) -> float:
    """The fraction of pixels an artifact left exactly as they were."""
    return float((y == x).all(0).float().mean())


def test_a_smear_blurs_a_region_of_a_textured_image_not_all_of_it() -> None:
    """On a texture (every pixel differs from its neighbours, so a blur changes each one) a smear still leaves the
    pixels outside its soft region exactly alone, for some draws a large part of the image."""
    from imgalign.rewards.artifact import add_artifact

    x = torch.rand(3, 64, 64, generator=torch.Generator().manual_seed(0))
    kept = [unchanged_fraction(x, add_artifact(x, "smear", random.Random(seed))) for seed in range(6)]
    assert max(kept) > 0.05 and min(kept) < 0.95


def test_a_grid_texture_covers_a_region_or_the_whole_image() -> None:
    """Half of the draws put the grid inside a soft region (the rest of a flat image kept exactly), half over the
    whole image."""
    from imgalign.rewards.artifact import add_artifact

    flat = torch.full((3, 64, 64), 0.5)
    kept = [unchanged_fraction(flat, add_artifact(flat, "grid", random.Random(seed))) for seed in range(12)]
    assert min(kept) == 0.0 and max(kept) > 0.05


def test_the_noise_of_a_noise_artifact_is_drawn_from_the_rng() -> None:
    """Each draw has its own noise, not one fixed pattern rescaled: where two draws both add noise to a flat grey
    image, its sign agrees about half the time."""
    from imgalign.rewards.artifact import add_artifact

    flat = torch.full((3, 64, 64), 0.5)
    d0 = add_artifact(flat, "noise", random.Random(0)) - flat
    d1 = add_artifact(flat, "noise", random.Random(1)) - flat
    both = (d0 != 0) & (d1 != 0)
    assert both.sum() > 500
    agree = float((d0[both].sign() == d1[both].sign()).float().mean())
    assert 0.3 < agree < 0.7


def test_build_shapes_artifact_records_its_fit_in_the_head_and_the_model_card(tmp_path: Path) -> None:
    """The head's metadata keeps the fit's metrics and the training size; the result carries the fit's metrics; the
    model card names the head's form, the validation accuracy and the whole result as JSON."""
    from imgalign.rewards.artifact import build_shapes_artifact
    from imgalign.rewards.heads import load_head

    res = build_shapes_artifact(tmp_path, n=10, test_n=7, hidden=0)
    head, meta = load_head(tmp_path / "head.safetensors", task="artifact")
    assert head.hidden == 0 and meta["extra"] == {"metrics": res["fit_metrics"], "n_train": 10}
    assert set(res["fit_metrics"]) >= {"val_acc"}
    card = (tmp_path / "README.md").read_text()
    assert "- **Head**: a linear layer\n" in card
    assert f"(validation accuracy {res['fit_metrics']['val_acc']:.3f})" in card
    assert json.loads(card[card.index("```json\n") + 8 : card.rindex("\n```")]) == res


def test_the_model_card_names_an_mlp_head_by_its_hidden_size() -> None:
    from imgalign.rewards.artifact import ARTIFACT_KINDS, _model_card

    result = {
        "features": "stats",
        "hidden": 32,
        "n_train_per_class": 5,
        "fit_metrics": {"val_acc": 0.75, "train_acc": 0.5},
        "test_accuracy": 0.5,
        "test_clean_accuracy": 0.5,
        "test_artifact_recall_per_kind": dict.fromkeys(ARTIFACT_KINDS, 0.5),
    }
    card = _model_card(result)
    assert "- **Head**: an MLP with one hidden layer of 32 units\n" in card
    assert "(validation accuracy 0.750)" in card and "| grid | 0.500 |" in card


def test_the_artifact_reward_refuses_other_features_naming_its_head_and_the_advice() -> None:
    """features= naming another encoder than the head's (not a moved copy of it) is refused: the message names the
    head as the user gave it and says features= is only for an encoder that moved."""
    from imgalign.rewards.base import build_reward

    with pytest.raises(ValueError) as e:
        build_reward("artifact:features=shapes-clip")
    assert str(e.value) == (
        "artifact reward: head 'shapes-artifact' was fitted on features 'stats', not 'shapes-clip'; give features= "
        "only for an encoder that moved (the head's are used)"
    )
    assert build_reward("artifact:features=stats").encoder.name == "stats"


def test_the_artifact_head_is_moved_to_the_rewards_device() -> None:
    """The head (weights and its standardisation buffers) lives on the reward's device (meta: no memory), as the
    scoring moves the features there."""
    from imgalign.rewards.base import build_reward

    r = build_reward("artifact", device="meta")
    assert {t.device.type for t in [*r.head.parameters(), *r.head.buffers()]} == {"meta"}
