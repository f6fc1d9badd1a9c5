"""rewards/clip.py: the transformers CLIP support (mutation round 15 found these unchecked)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from imgalign.rewards import build_reward
from tests.conftest import copy_with_json


@pytest.fixture(scope="module")
def hf_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from imgalign.trainers.testing import tiny_transformers_clip

    return tiny_transformers_clip(tmp_path_factory.mktemp("hfclip") / "clip")


X = torch.linspace(0, 1, 3 * 32 * 32).view(1, 3, 32, 32)


def _cosine(folder: Path | str, prompt: str) -> float:
    """The clip reward's cosine of the fixed image X and `prompt`."""
    return build_reward(f"clip:model={folder}")(X, [prompt]).details[0]["cosine"]


def _cut_cosine(folder: Path, prompt: str) -> float:
    """The cosine transformers' own CLIPModel gives X and `prompt` cut by its tokenizer to 77 tokens (the start and
    end tokens among them)."""
    from transformers import CLIPImageProcessor, CLIPModel, CLIPTokenizer

    from imgalign.rewards.features import image_processor_transform

    model, tok = CLIPModel.from_pretrained(folder).eval(), CLIPTokenizer.from_pretrained(folder)
    prep = image_processor_transform(CLIPImageProcessor.from_pretrained(folder), "x", "cpu", torch.float32)
    ids = tok([prompt], truncation=True, max_length=77, return_tensors="pt")["input_ids"]
    assert ids.shape == (1, 77)
    with torch.no_grad():
        txt = model.get_text_features(input_ids=ids).pooler_output
        img = model.get_image_features(pixel_values=prep(X)).pooler_output
    return float(torch.nn.functional.cosine_similarity(img, txt, dim=-1)[0])


def test_a_long_prompt_is_cut_to_the_models_context_with_its_start_and_end_tokens(hf_clip: Path) -> None:
    """The tiny tokenizer spells by character: a 100-letter prompt is scored as its start in 77 tokens (75 letters
    and the start and end tokens), as transformers' tokenizer cuts it, not shorter."""
    assert _cosine(hf_clip, "abc" * 33) == pytest.approx(_cut_cosine(hf_clip, "abc" * 33), abs=1e-5)


def test_the_context_is_the_models_positions_when_the_tokenizer_allows_more(
    hf_clip: Path, tmp_path: Path
) -> None:
    """A tokenizer whose model_max_length (1000 here) exceeds the text tower's 77 positions: prompts are still cut
    at 77 tokens (past them the model has no position embedding)."""
    folder = copy_with_json(hf_clip, tmp_path / "clip", "tokenizer_config.json", model_max_length=1000)
    r = build_reward(f"clip:model={folder}")
    assert r.tokenizer.context_length == 77
    assert _cosine(folder, "abc" * 33) == pytest.approx(_cut_cosine(hf_clip, "abc" * 33), abs=1e-5)


def test_a_transformers_clip_scores_in_bfloat16(hf_clip: Path) -> None:
    """dtype=bfloat16: the model and its preprocessing both run in bfloat16 (mixed, the model failed on the pixels),
    with the float32 cosines to bfloat16's precision."""
    x, prompts = torch.rand(2, 3, 40, 36), ["a red circle", "two blue squares"]
    ref = build_reward(f"clip:model={hf_clip}")(x, prompts)
    r = build_reward(f"clip:model={hf_clip}", dtype=torch.bfloat16)
    assert next(r.model.parameters()).dtype == torch.bfloat16
    got = r(x, prompts)
    assert [d["cosine"] for d in got.details] == pytest.approx([d["cosine"] for d in ref.details], abs=0.05)


def test_load_transformers_clip_gives_the_processors_mean_std_and_the_models_size(hf_clip: Path) -> None:
    """The size, mean and std it returns are the processor's (the probes preprocess a CLIPReward's model with them)."""
    from transformers import CLIPImageProcessor

    from imgalign.rewards.clip import TransformersCLIP, TransformersCLIPTokens, load_transformers_clip

    proc = CLIPImageProcessor.from_pretrained(hf_clip)
    model, tok, size, mean, std, how = load_transformers_clip(
        str(hf_clip), torch.device("cpu"), torch.float32
    )
    assert isinstance(model, TransformersCLIP) and isinstance(tok, TransformersCLIPTokens)
    assert size == 32 and how == ("processor", "bicubic")
    assert mean == pytest.approx(tuple(proc.image_mean)) and std == pytest.approx(tuple(proc.image_std))
    assert mean != pytest.approx(std)


def test_the_reward_crops_odd_margins_as_the_image_processor_does(hf_clip: Path) -> None:
    """A 49 x 40 image resizes to 39 x 32 and crops 7 rows: transformers' processor drops int(3.5) = 3 above,
    open_clip's arithmetic (round) 4; the reward scores the image processor's pixels."""
    from transformers import CLIPImageProcessor

    from imgalign.rewards.features import image_processor_transform

    x = torch.zeros(1, 3, 49, 40)
    x[..., 24:, :] = 1.0  # a horizontal edge: a row's shift moves it
    r = build_reward(f"clip:model={hf_clip}")
    prep = image_processor_transform(CLIPImageProcessor.from_pretrained(hf_clip), "x", "cpu", torch.float32)
    with torch.no_grad():
        img = r.model.encode_image(prep(x))
        txt = r.model.encode_text(r.tokenizer(["a red circle"]))
    ref = torch.nn.functional.cosine_similarity(img, txt, dim=-1)
    assert r(x, ["a red circle"]).details[0]["cosine"] == pytest.approx(float(ref[0]), abs=1e-5)


def test_transformers_config_of_an_open_clip_folder_a_json_list_or_a_hub_file_known_missing(
    hf_clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """None, not an error, for: an open_clip folder whose config.json is not JSON (open_clip reads it), a config.json
    holding a list, and a Hub id whose cache records config.json as missing; and a CLIP folder is no "other"
    transformers model."""
    from huggingface_hub import constants

    from imgalign.rewards.clip import other_transformers_model, transformers_clip_config, transformers_config

    oc = tmp_path / "oc"
    oc.mkdir()
    (oc / "config.json").write_text("{not json")
    (oc / "open_clip_config.json").write_text("{}")
    assert transformers_config(str(oc)) is None
    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / "config.json").write_text('[{"model_type": "clip"}]')
    assert transformers_config(str(listed)) is None and transformers_clip_config(str(listed)) is None
    repo = tmp_path / "hub" / "models--org--gone"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / ".no_exist" / "abc123").mkdir(parents=True)
    (repo / ".no_exist" / "abc123" / "config.json").write_text("")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert transformers_config("org/gone") is None
    assert other_transformers_model("x", str(hf_clip)) is None


def test_cut_prompts_needs_an_integer_context() -> None:
    """A tokenizer with ``encode`` but no integer ``context_length`` (its length unknown here) cuts nothing said."""
    from imgalign.rewards.clip import cut_prompts

    def encode(p: str) -> list[int]:
        return list(range(len(p)))

    assert cut_prompts(SimpleNamespace(encode=encode, context_length=None), ["a" * 500]) == []
    assert cut_prompts(SimpleNamespace(encode=encode, context_length=10), ["a" * 8, "a" * 9]) == [1]


def test_a_transformers_clip_with_a_cut_weights_file_is_named(hf_clip: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cut"
    shutil.copytree(hf_clip, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ValueError, match=rf"transformers CLIP '{folder}': its weights file .* is damaged"):
        build_reward(f"clip:model={folder}")


def test_a_processor_that_does_not_load_keeps_the_advice_to_give_one(hf_clip: Path) -> None:
    """processor= a Hub id not downloaded: one line naming it, ending in how to give a processor."""
    with pytest.raises(
        ValueError,
        match=r"cannot load the processor of transformers CLIP .* from 'org/never-downloaded'.*"
        r"takes processor=FOLDER_OR_HUB_ID",
    ):
        build_reward(f"clip:model={hf_clip},processor=org/never-downloaded")


def test_a_clip_whose_config_fails_transformers_checks_is_one_line(hf_clip: Path, tmp_path: Path) -> None:
    """A config.json edited to 5 attention heads over a width of 32: before, a traceback of huggingface_hub's
    StrictDataclassClassValidationError ("Class validation error for validator 'validate_architecture'") from the
    reward, the clip: features and GenEval's colour classifier alike; one line names the model and the reason."""
    from imgalign.eval.real import ClipColorClassifier
    from imgalign.rewards.features import build_features

    folder = tmp_path / "edited"
    shutil.copytree(hf_clip, folder)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["num_attention_heads"] = 5
    (folder / "config.json").write_text(json.dumps(config))
    said = (
        rf"cannot load transformers CLIP '{folder}': its config.json fails transformers' checks \(The hidden size "
        r"\(32\) is not a multiple of the number of attention heads \(5\)\); if config.json was edited"
    )
    for make in (
        lambda: build_reward(f"clip:model={folder}"),
        lambda: build_features(f"clip:{folder}"),
        lambda: ClipColorClassifier(str(folder)),
    ):
        with pytest.raises(ValueError, match=said):
            make()


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            {"hidden_act": "nonsense"},
            r"its config.json fails transformers' checks \(transformers knows no 'nonsense'\)",
        ),
        (
            {"attn_implementation": "nonsense"},
            r"Specified `attn_implementation=\"nonsense\"` is not supported",
        ),
    ],
)
def test_a_clip_config_with_a_name_transformers_does_not_know_is_one_line(
    hf_clip: Path, tmp_path: Path, edit: dict[str, str], said: str
) -> None:
    """A text tower's hidden_act no activation of transformers' (before: a KeyError: 'nonsense' traceback), or an
    attention implementation it does not have: one line naming the model."""
    folder = tmp_path / "edited"
    shutil.copytree(hf_clip, folder)
    config = json.loads((folder / "config.json").read_text())
    (config["text_config"] if "hidden_act" in edit else config).update(edit)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=rf"cannot load transformers CLIP '{folder}': .*{said}"):
        build_reward(f"clip:model={folder}")
