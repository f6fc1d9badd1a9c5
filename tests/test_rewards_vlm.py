"""vlm_loglik: the masked mean against hand-computed values, and a tiny random Qwen2-VL saved and loaded offline."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from test_rewards_tiny import make_tiny_qwen2_vl

from imgalign.rewards.base import build_reward
from imgalign.rewards.vlm import masked_mean_logprob

torch.set_num_threads(1)


def test_masked_mean_logprob_hand_computed() -> None:
    # vocab 2, T = 3: position 0 predicts token 1, position 1 predicts token 2
    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0], [5.0, 5.0]]])
    ids = torch.tensor([[1, 1, 0]])
    mask = torch.tensor([[False, True, True]])
    mean, tok = masked_mean_logprob(logits, ids, mask)
    # p(token1 | pos0) = 1/2; p(token0 | pos1) = 3/4
    assert tok[0, 1].item() == pytest.approx(math.log(0.5))
    assert tok[0, 2].item() == pytest.approx(math.log(0.75))
    assert mean.item() == pytest.approx((math.log(0.5) + math.log(0.75)) / 2)
    mean_one, _ = masked_mean_logprob(logits, ids, torch.tensor([[False, False, True]]))
    assert mean_one.item() == pytest.approx(math.log(0.75))
    # a bf16 model's logits are normalised in float32 (bf16 log-probs keep ~3 significant digits)
    mean16, tok16 = masked_mean_logprob(logits.bfloat16(), ids, mask)
    want, want_tok = masked_mean_logprob(logits.bfloat16().float(), ids, mask)
    assert mean16.dtype == tok16.dtype == torch.float32
    torch.testing.assert_close(tok16, want_tok, rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_qwen2_vl(tmp_path_factory.mktemp("vlm") / "qwen2vl")


def test_qwen2_vl_scores_prompt_tokens_only(tiny_vlm: Path) -> None:
    r = build_reward(f"vlm_loglik:model={tiny_vlm},batch_size=4")
    prompts = ["a photo of a red circle", "a photo of two squares", "a cross"]
    x = torch.rand(3, 3, 64, 64)
    out = r(x, prompts)
    assert out.scores.dtype == torch.float32 and out.scores.shape == (3,)
    assert torch.isfinite(out.scores).all() and (out.scores < 0).all()
    tok = r.tokenizer
    for p, d in zip(prompts, out.details):
        # exactly the prompt's tokens are scored: no end-of-turn, newline or template tokens
        assert tok.convert_tokens_to_string(d["tokens"]) == p
        assert out.scores[prompts.index(p)].item() == pytest.approx(
            sum(d["token_logprobs"]) / len(d["tokens"]), rel=1e-5
        )


def test_qwen2_vl_batched_with_padding_matches_single(tiny_vlm: Path) -> None:
    r = build_reward(f"vlm_loglik:model={tiny_vlm},batch_size=8,query=Describe this image.")
    prompts = ["a photo of a red circle", "a cross", "a photo of four white triangles"]
    x = torch.rand(3, 3, 64, 64)
    batched = r(x, prompts).scores
    single = torch.cat([r(x[i : i + 1], prompts[i : i + 1]).scores for i in range(3)])
    assert torch.allclose(batched, single, atol=1e-4)


def test_batches_are_padded_on_the_right_whatever_the_tokenizer_default(tiny_vlm: Path) -> None:
    """Right padding keeps every real token at the position it has alone (a left-padded row shifts them, which
    models with absolute positions or an image-token offset do not undo); the tokenizer's own setting is kept."""
    from imgalign.rewards.base import to_pil

    r = build_reward(f"vlm_loglik:model={tiny_vlm}")
    r.tokenizer.padding_side = "left"  # as many VLM processors ship
    prompts = ["a photo of four white triangles", "a cross"]
    enc, mask = r.teacher_forced_inputs(prompts, to_pil(torch.rand(2, 3, 64, 64)))
    attn = enc["attention_mask"]
    assert attn[:, 0].all() and not attn[1, -1] and attn[0].all()  # the short row's padding is at its end
    n = int(attn[1].sum())
    alone, _ = r.teacher_forced_inputs(prompts[1:], to_pil(torch.rand(1, 3, 64, 64)))
    assert torch.equal(enc["input_ids"][1, :n], alone["input_ids"][0])
    assert r.tokenizer.padding_side == "left"


def test_qwen2_vl_matches_independent_forward(tiny_vlm: Path) -> None:
    """Recompute the reward by hand: full chat text, locate the prompt by string position, score those tokens."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    r = build_reward(f"vlm_loglik:model={tiny_vlm}")
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm).eval()
    proc = AutoProcessor.from_pretrained(tiny_vlm)
    prompt = "two blue squares"
    x = torch.rand(1, 3, 64, 64)
    from imgalign.rewards.base import to_pil

    msgs = [
        {"role": "user", "content": [{"type": "image"}]},
        {"role": "assistant", "content": [{"type": "text", "text": prompt}]},
    ]
    text = proc.apply_chat_template(msgs, tokenize=False)
    enc = proc(text=[text], images=to_pil(x), return_tensors="pt")
    ids = enc["input_ids"][0]
    n = len(prompt)  # byte-level tokenizer without merges: one token per character
    end = (ids == proc.tokenizer.convert_tokens_to_ids("<|im_end|>")).nonzero()[-1].item()
    with torch.no_grad():
        logp = torch.log_softmax(model(**enc).logits[0].float(), -1)
    expected = torch.stack([logp[t - 1, ids[t]] for t in range(end - n, end)]).mean()
    assert r(x, [prompt]).scores[0].item() == pytest.approx(expected.item(), rel=1e-5)


def test_llava_word_level_tokenizer(tmp_path: Path) -> None:
    from test_rewards_tiny import make_tiny_llava

    d = make_tiny_llava(tmp_path / "llava")
    r = build_reward(f"vlm_loglik:model={d},query=describe this image.")
    prompts = ["a photo of two red circles", "a photo of a cross left of a square"]
    out = r(torch.rand(2, 3, 64, 64), prompts)
    assert torch.isfinite(out.scores).all()
    for p, det in zip(prompts, out.details):
        assert det["tokens"] == p.split()  # the prompt's words, without <|end|>
    single = r(torch.rand(1, 3, 64, 64), prompts[:1]).scores
    assert single.shape == (1,)


def test_a_word_outside_the_vocabulary_does_not_end_the_scored_prompt(tmp_path: Path) -> None:
    """A word-level tokenizer turns an unknown word into <unk>, a special token; the words after it are still the
    prompt's and are scored (they were dropped: 'a square with a red circle' scored as 'a square')."""
    from test_rewards_tiny import make_tiny_llava

    r = build_reward(f"vlm_loglik:model={make_tiny_llava(tmp_path / 'llava')}")
    prompt = "a photo of zebra red circles"
    det = r(torch.rand(1, 3, 64, 64), [prompt]).details[0]
    assert det["tokens"] == ["a", "photo", "of", r.tokenizer.unk_token, "red", "circles"]


def test_masked_mean_logprob_of_a_row_without_targets_is_zero() -> None:
    """A row with nothing to score has mean 0 (the count is clamped to 1), not 0 / 0."""
    logits = torch.zeros(2, 3, 4)
    ids = torch.tensor([[1, 2, 3], [1, 2, 3]])
    mask = torch.tensor([[False, True, True], [False, False, False]])
    mean, tok = masked_mean_logprob(logits, ids, mask)
    assert mean.tolist() == pytest.approx([math.log(0.25), 0.0])
    assert tok[1].tolist() == [0.0, 0.0, 0.0]


def test_prompt_mask_starts_at_the_longest_common_prefix_of_the_real_tokens() -> None:
    """Hand ids: the prefix's last token (7, say "\\n") merges with the prompt's first letter into one token (3) in
    the full text, so the prompt starts after the 2 shared tokens, not after len(prefix) = 3; it ends before the first
    stop token (9). Padding (0, attention 0) is skipped on either side."""
    from imgalign.rewards.vlm import VLMLogLikReward

    r = VLMLogLikReward.__new__(VLMLogLikReward)  # prompt_mask reads only stop_ids
    r.stop_ids = {9}
    full = torch.tensor([[1, 2, 3, 5, 6, 9, 0], [0, 1, 2, 3, 5, 9, 4]])
    full_attn = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1, 1]])
    prefix = torch.tensor([[1, 2, 7], [1, 2, 7]])
    mask = r.prompt_mask(full, full_attn, prefix, torch.ones_like(prefix))
    assert mask.int().tolist() == [[0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 0, 0]]


def test_an_empty_prompt_in_a_batch_is_refused(tiny_vlm: Path) -> None:
    r = build_reward(f"vlm_loglik:model={tiny_vlm}")
    with pytest.raises(ValueError, match="no tokens to score"):
        r(torch.rand(2, 3, 64, 64), ["a cross", ""])


def test_the_query_follows_the_image_in_the_user_turn_and_reaches_the_model(tiny_vlm: Path) -> None:
    """User turn = [image, query], as the module docstring says; the query changes the text the prompt is scored
    after, so it changes the score."""
    r = build_reward(f"vlm_loglik:model={tiny_vlm},query=Describe this image.")
    assert r._messages("a cross") == [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe this image."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a cross"}]},
    ]
    x = torch.rand(1, 3, 64, 64)
    plain = build_reward(f"vlm_loglik:model={tiny_vlm}")
    assert r(x, ["a cross"]).scores.item() != pytest.approx(plain(x, ["a cross"]).scores.item(), abs=1e-6)
    # no query (the default): the user turn is the image alone, without an empty text part
    assert plain._messages(None) == [{"role": "user", "content": [{"type": "image"}]}]


def test_every_batch_keeps_its_details(tiny_vlm: Path) -> None:
    """batch_size=1 over three prompts: three scores and three details, each with the tokens of its own prompt."""
    r = build_reward(f"vlm_loglik:model={tiny_vlm},batch_size=1")
    prompts = ["a cross", "two squares", "a red circle"]
    out = r(torch.rand(3, 3, 64, 64), prompts)
    assert out.scores.shape == (3,) and len(out.details) == 3
    assert [r.tokenizer.convert_tokens_to_string(d["tokens"]) for d in out.details] == prompts


def test_trust_remote_code_is_off_unless_asked(tiny_vlm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Remote code runs only with trust_remote_code=true, for the model and its processor alike."""
    import transformers

    seen: list[tuple[str, object]] = []
    for cls in (transformers.AutoModelForImageTextToText, transformers.AutoProcessor):
        load = cls.from_pretrained

        def hooked(*a, _load=load, _name=cls.__name__, **k):
            seen.append((_name, k.get("trust_remote_code")))
            return _load(*a, **k)

        monkeypatch.setattr(cls, "from_pretrained", hooked)
    build_reward(f"vlm_loglik:model={tiny_vlm}")
    assert [t for _, t in seen] == [False, False]
    seen.clear()
    build_reward(f"vlm_loglik:model={tiny_vlm},trust_remote_code=true")
    assert [t for _, t in seen] == [True, True]


def test_a_chat_template_on_the_processor_or_its_tokenizer_is_enough(
    tiny_vlm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a processor with no chat template anywhere is refused."""
    import imgalign.rewards.vlm as vlm
    from imgalign.rewards.vlm import VLMLogLikReward, load_vlm

    model, proc = load_vlm(str(tiny_vlm), torch.device("cpu"), torch.float32)
    monkeypatch.setattr(vlm, "load_vlm", lambda *a, **k: (model, proc))
    proc.tokenizer.chat_template = None  # the processor's own template is still there
    r = VLMLogLikReward(model="tiny")
    assert torch.isfinite(r(torch.rand(1, 3, 64, 64), ["a cross"]).scores).all()
    proc.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        VLMLogLikReward(model="tiny")


def test_one_bos_whether_or_not_the_chat_template_renders_it(tmp_path: Path) -> None:
    """With a tokenizer that prepends BOS itself (as Llama's does): a template that renders BOS gets no second one
    from the tokenizer, and a template without it gets the tokenizer's."""
    from test_rewards_tiny import make_tiny_llava
    from tokenizers import processors

    from imgalign.rewards.base import to_pil

    r = build_reward(f"vlm_loglik:model={make_tiny_llava(tmp_path / 'llava')}")
    tok = r.tokenizer
    bos = tok.bos_token_id
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    assert tok("a cross").input_ids[0] == bos  # this tokenizer now adds BOS on its own
    images = to_pil(torch.rand(2, 3, 64, 64))
    enc, mask = r.teacher_forced_inputs(["a cross", "two squares"], images)
    ids = enc["input_ids"]
    assert ids[:, 0].tolist() == [bos, bos] and not (ids[:, 1:] == bos).any()
    r.processor.chat_template = r.processor.chat_template.replace("{{ bos_token }}", "")
    enc, _ = r.teacher_forced_inputs(["a cross"], images[:1])
    assert enc["input_ids"][0].tolist().count(bos) == 1 and enc["input_ids"][0, 0] == bos


def test_an_end_of_turn_id_0_in_the_generation_config_is_a_stop_token(
    tiny_vlm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Token id 0 (GPT-NeoX / SmolLM's <|endoftext|>) as the generation config's EOS stops the scored span like any
    other id (a truthiness test would drop it)."""
    import imgalign.rewards.vlm as vlm
    from imgalign.rewards.vlm import VLMLogLikReward, load_vlm

    model, proc = load_vlm(str(tiny_vlm), torch.device("cpu"), torch.float32)
    monkeypatch.setattr(vlm, "load_vlm", lambda *a, **k: (model, proc))
    assert 0 not in proc.tokenizer.all_special_ids
    model.generation_config.eos_token_id = [0]
    assert 0 in VLMLogLikReward(model="tiny").stop_ids
    model.generation_config.eos_token_id = 0
    assert 0 in VLMLogLikReward(model="tiny").stop_ids


def test_a_processor_without_a_tokenizer_is_its_own_tokenizer() -> None:
    """A processor object with a ``.tokenizer`` hands that over; one without it (a bare tokenizer) is the tokenizer."""
    from types import SimpleNamespace

    from imgalign.rewards.vlm import VLMLogLikReward

    r = VLMLogLikReward.__new__(VLMLogLikReward)  # the property reads only .processor
    inner = SimpleNamespace(name="tok")
    r.processor = SimpleNamespace(tokenizer=inner)
    assert r.tokenizer is inner
    r.processor = inner
    assert r.tokenizer is inner


def test_batch_size_below_1_is_refused_when_built(tiny_vlm: Path) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        build_reward(f"vlm_loglik:model={tiny_vlm},batch_size=0")
    assert build_reward(f"vlm_loglik:model={tiny_vlm},batch_size=2").batch_size == 2


def test_a_missing_folder_or_a_folder_of_another_kind_is_named(tmp_path: Path) -> None:
    """vlm_loglik:model=/no/such said transformers' "Repo id must be in the form 'repo_name'...", and a folder of
    another model kind "Unrecognized model in ..." without naming the reward or what to give."""
    from imgalign.rewards.base import build_reward

    with pytest.raises(
        FileNotFoundError, match=f"vlm_loglik: model folder '{tmp_path}/no/such' does not exist"
    ):
        build_reward(f"vlm_loglik:model={tmp_path}/no/such")
    (tmp_path / "config.json").write_text('{"something": 1}')
    with pytest.raises(
        ValueError, match="vlm_loglik: cannot load .* as a VLM .*; give a local save_pretrained"
    ):
        build_reward(f"vlm_loglik:model={tmp_path}")


@pytest.mark.parametrize("name", ["/no-such-vlm-folder", "./no-such", "~/imgalign-no-such-vlm", "a/b/c"])
def test_every_path_form_of_a_missing_folder_is_a_missing_folder(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Absolute, dotted, ~ and two-slash names are paths, not Hub ids: missing, they are named as missing folders
    (not handed to transformers, which read them as malformed Hub ids)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=f"vlm_loglik: model folder '{name}' does not exist"):
        build_reward(f"vlm_loglik:model={name}")


def test_a_quoted_tilde_folder_is_named_with_its_full_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """model=~/vlm (quoted, so the shell left the ~) where ~/vlm exists was handed to transformers as it is, which
    read it as a malformed Hub id ("Repo id must use alphanumeric chars"); it is a missing folder, named with the
    full path to give instead (as model specs elsewhere are)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "vlm").mkdir()
    monkeypatch.chdir(tmp_path)
    hint = f"\\(a quoted ~ is not expanded: give the full path, '{tmp_path}/vlm'\\)"
    with pytest.raises(FileNotFoundError, match=f"model folder '~/vlm' does not exist {hint}"):
        build_reward("vlm_loglik:model=~/vlm")


def test_an_uncached_hub_id_is_not_called_a_missing_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ORG/NAME (one slash) is a Hub id: offline and not cached it says so in one line, not "folder ... does not
    exist"."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as e:
        build_reward("vlm_loglik:model=imgalign-nobody/no-such-vlm")
    msg = str(e.value)
    assert (
        msg.startswith("vlm_loglik: cannot load 'imgalign-nobody/no-such-vlm' as a VLM (") and "\n" not in msg
    )
    assert "not in the local Hub cache" in msg
    assert e.value.__cause__ is None and e.value.__suppress_context__  # not the libraries' traceback too


def test_a_load_error_is_one_line_and_an_empty_one_is_named_by_its_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reason in "cannot load" is the first line of the library's error, or its type when it has no text."""
    import transformers

    def fail(text: str):
        def from_pretrained(*a, **k):
            raise OSError(text)

        return from_pretrained

    monkeypatch.setattr(
        transformers.AutoModelForImageTextToText, "from_pretrained", fail("bad weights\nmore")
    )
    with pytest.raises(ValueError) as e:
        build_reward(f"vlm_loglik:model={tmp_path}")
    assert str(e.value) == (
        f"vlm_loglik: cannot load '{tmp_path}' as a VLM (bad weights); give a local save_pretrained folder of a "
        "VLM, a cached Hub id, or shapes-vlm"
    )
    monkeypatch.setattr(transformers.AutoModelForImageTextToText, "from_pretrained", fail(""))
    with pytest.raises(ValueError, match=r"as a VLM \(OSError\); give"):
        build_reward(f"vlm_loglik:model={tmp_path}")


def test_a_prompt_with_no_stop_token_runs_to_the_last_real_token() -> None:
    """A template that ends the assistant turn with no special token: the prompt is every token after the prefix,
    the last real one included (padding still skipped)."""
    from imgalign.rewards.vlm import VLMLogLikReward

    r = VLMLogLikReward.__new__(VLMLogLikReward)  # prompt_mask reads only stop_ids
    r.stop_ids = {9}
    full = torch.tensor([[1, 2, 5, 6, 0], [1, 2, 5, 6, 4]])
    full_attn = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    prefix = torch.tensor([[1, 2], [1, 2]])
    mask = r.prompt_mask(full, full_attn, prefix, torch.ones_like(prefix))
    assert mask.int().tolist() == [[0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]


def test_shapes_vlm_loads_frozen_with_or_without_the_shapes_models_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """shapes-vlm loads in eval mode with no parameter requiring grad; without imgalign.shapes_models it is read
    from its embedded folder by transformers, the same way."""
    import sys

    from imgalign.rewards.vlm import load_vlm

    model, _ = load_vlm("shapes-vlm", torch.device("cpu"), torch.float32)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    monkeypatch.setitem(sys.modules, "imgalign.shapes_models", None)  # import fails
    model, proc = load_vlm("shapes-vlm", torch.device("cpu"), torch.float32)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert hasattr(proc, "apply_chat_template")


def test_a_sequence_past_the_models_positions_is_warned_once_naming_the_prompt(caplog) -> None:
    """The shapes VLM has 128 positions (rotary); a long prompt was scored past them with only the tokenizer's
    "will result in indexing errors", naming no prompt (and no error followed)."""
    r = build_reward("vlm_loglik")
    assert r.max_positions == 128
    short, long = "a red circle", " ".join(["a red circle above a blue square"] * 20)
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with caplog.at_level("WARNING", logger="imgalign.rewards.vlm"):
        r(x, [short, short])
        out = r(x, [short, long])
        r(x, [long, long])
    assert torch.isfinite(out.scores).all()
    # ours only: transformers' own "indexing errors" line reaches caplog too once another test let it propagate
    (msg,) = [rec.getMessage() for rec in caplog.records if rec.name == "imgalign.rewards.vlm"]
    assert msg.startswith("vlm_loglik (shapes-vlm): a prompt with its image and query takes ")
    assert "more than the model's 128 positions" in msg and msg.endswith(
        "e.g. 'a red circle above a blue square a red circle above a blue square a red circle above a blue ...'"
    )
