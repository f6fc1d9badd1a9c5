"""clip: CLIPScore math by hand, a tiny random open_clip model through every accepted model string."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from test_rewards_tiny import make_tiny_open_clip

from imgalign.rewards.base import build_reward
from imgalign.rewards.clip import CLIPSCORE_W, clipscore

torch.set_num_threads(1)


def test_clipscore_hand_computed() -> None:
    img = torch.tensor([[1.0, 0.0], [1.0, 0.0], [3.0, 4.0]])
    txt = torch.tensor([[1.0, 1.0], [-1.0, 0.0], [3.0, 4.0]])
    s = clipscore(img, txt)
    assert s.tolist() == pytest.approx([2.5 / 2**0.5, 0.0, 2.5])  # negative cosine clipped to 0
    assert clipscore(img, txt, w=1.0)[2].item() == pytest.approx(1.0)
    assert clipscore(img, txt, clamp=False)[1].item() == pytest.approx(-2.5)


def test_tiny_open_clip_reward_matches_manual(tmp_path: Path) -> None:
    d = make_tiny_open_clip(tmp_path / "clip")
    r = build_reward(f"clip:model=local-dir:{d},batch_size=2")
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, 3, 32, 32, generator=g)  # at the model's size: preprocessing is only the normalisation
    prompts = ["a photo of a circle", "a red square", "two crosses"]
    out = r(x, prompts)
    with torch.no_grad():
        img = r.model.encode_image((x - 0.5) / 0.25)
        txt = r.model.encode_text(r.tokenizer(prompts))
    cos = torch.nn.functional.cosine_similarity(img, txt, dim=-1)
    assert torch.allclose(out.scores, CLIPSCORE_W * cos.clamp(min=0), atol=1e-5)
    assert [d["cosine"] for d in out.details] == pytest.approx(cos.tolist(), abs=1e-5)
    # weight= and clamp= reach the score: with weight=1, clamp=false it is the plain cosine, negative ones kept
    assert cos.min() < 0  # "two crosses": the tiny model's text and image embeddings point apart
    raw = build_reward(f"clip:model=local-dir:{d},weight=1,clamp=false")
    assert torch.allclose(raw(x, prompts).scores, cos, atol=1e-5)
    plain = build_reward(f"clip:model={d}")  # a bare folder path works too
    assert torch.allclose(plain(x, prompts).scores, out.scores, atol=1e-5)
    big = torch.nn.functional.interpolate(x, size=64)  # other sizes are resized inside
    assert torch.isfinite(r(big, prompts).scores).all()


def test_model_strings_split_into_open_clip_name_and_pretrained(tmp_path: Path) -> None:
    from imgalign.rewards.clip import _split_name

    assert _split_name("ViT-B-32@openai", None) == ("ViT-B-32", "openai")
    assert _split_name("open_clip:ViT-B-32@laion2b", None) == ("ViT-B-32", "laion2b")
    assert _split_name("ViT-B-32", "openai") == ("ViT-B-32", "openai")
    assert _split_name("local-dir:/m@v2", None) == (
        "local-dir:/m@v2",
        None,
    )  # an @ inside a folder name stays
    assert _split_name(str(tmp_path), "") == (f"local-dir:{tmp_path}", None)


def test_open_clip_without_weights_is_refused(tmp_path: Path) -> None:
    """open_clip would build these with random weights after a log warning only."""
    from imgalign.rewards.clip import check_open_clip_weights

    with pytest.raises(ValueError, match="has no pretrained weights named"):
        check_open_clip_weights("ViT-B-32", None)
    with pytest.raises(FileNotFoundError, match="has no weights"):
        check_open_clip_weights(f"local-dir:{tmp_path}", None)
    check_open_clip_weights("ViT-B-32", "openai")  # named: loaded (and checked) later


def test_bad_model_names_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot load open_clip model"):
        build_reward("clip:model=NotAModel-1")


def test_a_misspelt_architecture_or_a_missing_folder_is_one_short_line(tmp_path: Path) -> None:
    """open_clip's own error listed all ~150 architectures, and named a missing folder as config '-no-such'."""
    with pytest.raises(ValueError, match=r"not an open_clip architecture \(close: ViT-B-32") as e:
        build_reward("clip:model=vit-b-23,pretrained=openai")
    assert len(str(e.value)) < 400
    with pytest.raises(ValueError, match="not a CLIP; the embedded CLIP is shapes-clip"):
        build_reward("clip:model=shapes")
    (tmp_path / "lora").mkdir()
    (tmp_path / "lora" / "pytorch_lora_weights.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="has no open_clip_config.json, so it is no open_clip model"):
        build_reward(f"clip:model={tmp_path / 'lora'}")
    for missing in (f"{tmp_path}/no-such", f"local-dir:{tmp_path}/no-such"):
        with pytest.raises(FileNotFoundError, match="does not exist|no such folder") as e:
            build_reward(f"clip:model={missing}")
        assert len(str(e.value)) < 400
    # a quoted ~ reaches open_clip unexpanded: said, with the full path, for both spellings
    home = str(Path("~/imgalign-clip").expanduser())
    for tilde in ("~/imgalign-clip", "local-dir:~/imgalign-clip"):
        with pytest.raises(
            FileNotFoundError, match=f"a quoted ~ is not expanded: give the full path, '{home}'"
        ):
            build_reward(f"clip:model={tilde}")


def test_an_uncached_pretrained_tag_is_one_line_without_open_clips_own_error_log(caplog) -> None:
    """open_clip logged 'Failed to download weights ...' at ERROR on the root logger and then raised it: the user
    saw the same failure twice, the first as a long library line. Other ERROR records still pass, and the filter
    is taken off the root logger again."""
    import logging

    filters = list(logging.getLogger().filters)
    with caplog.at_level(logging.ERROR), pytest.raises(ValueError, match="not in the local Hub cache"):
        build_reward("clip:model=ViT-B-32,pretrained=openai")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    from imgalign.hub import quiet_open_clip_errors

    with caplog.at_level(logging.ERROR), quiet_open_clip_errors():
        logging.getLogger().error("ours")
    assert [r.getMessage() for r in caplog.records] == ["ours"]
    assert logging.getLogger().filters == filters  # the filter is gone once the model has loaded


@pytest.mark.parametrize(
    "resize_mode, interpolation",
    [("shortest", "bicubic"), ("squash", "bicubic"), ("shortest", "bilinear"), ("longest", "bicubic")],
)
@pytest.mark.parametrize("hw", [(64, 64), (96, 144), (144, 80), (70, 100), (96, 142)])
def test_tensor_preprocessing_matches_open_clips_transform(resize_mode, interpolation, hw) -> None:
    """Non-square images are resized and centre-cropped (squashed, or centre-padded) as the model's own
    preprocess does; the only difference left is open_clip's 8-bit PIL round trip (< 0.02 in normalised
    units)."""
    import numpy as np
    import open_clip
    from open_clip.transform import PreprocessCfg, image_transform_v2

    from imgalign.rewards.base import to_pil
    from imgalign.rewards.features import clip_preprocess

    torch.manual_seed(0)
    x = torch.nn.functional.interpolate(torch.rand(1, 3, 8, 8), size=hw, mode="bilinear")
    pil = to_pil(x)[0]
    xq = torch.from_numpy(np.asarray(pil, dtype=np.float32) / 255).permute(2, 0, 1)[None]
    mean, std = open_clip.OPENAI_DATASET_MEAN, open_clip.OPENAI_DATASET_STD
    cfg = PreprocessCfg(size=48, mean=mean, std=std, resize_mode=resize_mode, interpolation=interpolation)
    ref = image_transform_v2(cfg, is_train=False)(pil)[None]
    ours = clip_preprocess(xq, 48, mean, std, resize_mode, interpolation)
    assert ours.shape == ref.shape and float((ours - ref).abs().max()) < 0.03


def test_tensor_preprocessing_clamps_the_resize_overshoot_as_8_bit_pixels_do() -> None:
    """A bicubic resize overshoots beside a sharp edge; open_clip's PIL images cannot leave [0, 1], so neither may
    ours before the normalisation."""
    from imgalign.rewards.features import clip_preprocess

    x = torch.zeros(1, 3, 64, 80)
    x[..., 32:] = 1.0  # a step
    out = clip_preprocess(x, 48, (0.5,) * 3, (0.25,) * 3, "shortest", "bicubic")
    assert float(out.min()) >= -2.0 - 1e-6 and float(out.max()) <= 2.0 + 1e-6


@pytest.mark.parametrize(
    ("size", "crop", "hw", "out"),
    [
        ({"shortest_edge": 36}, {"height": 32, "width": 32}, (48, 64), (32, 32)),
        (
            {"shortest_edge": 36},
            {"height": 29, "width": 29},
            (48, 63),
            (29, 29),
        ),  # odd margins: floor, not round
        ({"shortest_edge": 36}, None, (48, 64), (36, 48)),  # no crop: the aspect is kept
        ({"height": 40, "width": 30}, None, (48, 64), (40, 30)),  # a fixed size: squashed
        (
            {"shortest_edge": 32},
            {"height": 40, "width": 36},
            (32, 32),
            (40, 36),
        ),  # a larger crop: zero-padded
        (
            {"shortest_edge": 32},
            {"height": 37, "width": 30},
            (32, 32),
            (37, 30),
        ),  # larger in height only, odd pad
        ({"shortest_edge": 36}, None, (48, 66), (36, 49)),  # the long edge int(36 * 66 / 48) = int(49.5)
    ],
)
def test_processor_geometry_matches_the_image_processor(
    size: dict[str, int], crop: dict[str, int] | None, hw: tuple[int, int], out: tuple[int, int]
) -> None:
    """transformers' resize and centre crop, applied to a uint8 tensor by the processor itself (no rescale or
    normalisation): ours differs only by the processor's uint8 rounding after its resize."""
    from transformers import BitImageProcessor

    from imgalign.rewards.features import processor_geometry

    proc = BitImageProcessor(
        size=size,
        crop_size=crop or {"height": 8, "width": 8},
        do_center_crop=crop is not None,
        do_rescale=False,
        do_normalize=False,
    )
    torch.manual_seed(0)
    x = torch.nn.functional.interpolate(torch.rand(1, 3, 8, 8), size=hw, mode="bilinear")
    x8 = (x * 255).round().to(torch.uint8)
    ref = proc(x8[0], return_tensors="pt")["pixel_values"].float() / 255
    crop_hw = (crop["height"], crop["width"]) if crop else None
    resize_hw = (size["height"], size["width"]) if "height" in size else None
    ours = processor_geometry(x8.float() / 255, size.get("shortest_edge"), resize_hw, crop_hw)
    assert tuple(ours.shape[-2:]) == tuple(ref.shape[-2:]) == out
    assert float((ours - ref).abs().max()) < 0.01


def test_processor_size_fields_from_a_dict_or_an_attribute_object() -> None:
    """A processor's size / crop_size is a plain dict (older transformers, or the ``or {}`` default) or a SizeDict
    read by attribute: both give the field, unset or 0 is None, and a missing height or width is refused."""
    from types import SimpleNamespace

    from imgalign.rewards.features import _height_width, _size_field

    assert _size_field({"shortest_edge": 256}, "shortest_edge") == 256
    assert _size_field({"height": 224}, "width") is None and _size_field({"height": 0}, "height") is None
    assert _size_field(SimpleNamespace(height=224, width=None), "height") == 224
    assert _size_field(SimpleNamespace(height=224, width=None), "width") is None
    assert _height_width({"height": 224, "width": 160}, "bad") == (224, 160)
    with pytest.raises(ValueError, match="no width; set them"):
        _height_width({"height": 224}, "no width")


def test_openai_weights_get_quick_gelu() -> None:
    from imgalign.rewards.clip import _quick_gelu

    assert _quick_gelu("ViT-B-32", "openai") and not _quick_gelu("ViT-B-32", "laion2b_s34b_b79k")
    assert not _quick_gelu("local-dir:/x", "openai") and not _quick_gelu("ViT-B-32", None)


def test_open_clip_prefixed_names_keep_their_own_prefix() -> None:
    """Only the open_clip: prefix is dropped (an hf-hub: id keeps its own), and only the first @ splits the
    architecture from its pretrained tag or checkpoint path (a path may hold another @)."""
    from imgalign.rewards.clip import _split_name

    assert _split_name("open_clip:hf-hub:timm/ViT-B-16-SigLIP", None) == ("hf-hub:timm/ViT-B-16-SigLIP", None)
    assert _split_name("ViT-B-32@/ckpt/run@3/m.pt", None) == ("ViT-B-32", "/ckpt/run@3/m.pt")


def test_an_open_clip_folder_with_bin_or_pth_weights_is_accepted(tmp_path: Path) -> None:
    from imgalign.rewards.clip import check_open_clip_weights

    """A local-dir: folder holding only a .bin or only a .pth checkpoint has weights."""
    for name in ("open_clip_pytorch_model.bin", "epoch_32.pth"):
        folder = tmp_path / name.split(".")[-1]
        folder.mkdir()
        (folder / name).write_bytes(b"")
        check_open_clip_weights(f"local-dir:{folder}", None)


def test_open_clip_precision_follows_the_dtype() -> None:
    from imgalign.rewards.clip import _precision

    assert [_precision(d) for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64)] == [
        "fp32",
        "fp16",
        "bf16",
        "fp32",
    ]


def test_the_models_own_resize_mode_reaches_the_reward_and_the_features(tmp_path: Path) -> None:
    """A model whose preprocess config squashes: a 32 x 64 image is squashed to 32 x 32 (not centre-cropped) by
    the clip reward and by the open_clip: feature encoder alike."""

    from imgalign.rewards.features import build_features, clip_preprocess

    d = make_tiny_open_clip(tmp_path / "clip", preprocess={"resize_mode": "squash"})
    r = build_reward(f"clip:model=local-dir:{d}")
    assert r.how == ("squash", "bicubic")
    torch.manual_seed(0)
    x = torch.rand(2, 3, 32, 64)
    with torch.no_grad():
        img = r.model.encode_image(clip_preprocess(x, 32, (0.5,) * 3, (0.25,) * 3, "squash", "bicubic"))
        crop = r.model.encode_image(clip_preprocess(x, 32, (0.5,) * 3, (0.25,) * 3, "shortest", "bicubic"))
    assert not torch.allclose(img, crop, atol=1e-3)
    img_r, _ = r.embed(x, ["a cross", "a square"])
    torch.testing.assert_close(img_r, img, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(build_features(f"open_clip:local-dir:{d}")(x), img, rtol=1e-5, atol=1e-5)


def test_clip_reward_reads_clamp_as_a_boolean_option(tmp_path: Path) -> None:
    """clamp= given as the string "false" (as a config file may) turns the clamp off; a non-boolean is refused."""
    from imgalign.rewards.clip import CLIPReward

    d = make_tiny_open_clip(tmp_path / "clip")
    r = CLIPReward(model=f"local-dir:{d}", clamp="false")
    assert r.clamp is False and not r.model.training  # and the model scores in eval mode
    with pytest.raises(ValueError, match="clamp"):
        CLIPReward(model=f"local-dir:{d}", clamp="maybe")
    with pytest.raises(ValueError, match="batch_size"):
        CLIPReward(model=f"local-dir:{d}", batch_size=0)


def test_open_clip_prefixed_shapes_clip_is_the_embedded_model() -> None:
    """``open_clip:shapes-clip`` names the embedded shapes CLIP (not an open_clip architecture called shapes-clip):
    the feature encoder gives the same features as ``shapes-clip``."""
    from imgalign.rewards.features import build_features

    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(build_features("open_clip:shapes-clip")(x), build_features("shapes-clip")(x))


def test_a_prompt_longer_than_the_context_is_warned_once(tmp_path: Path, caplog) -> None:
    """open_clip's tokenizer cuts a prompt at its context (77 tokens; the shapes CLIP's 24) silently: the score
    then ignores the rest of the prompt. One warning per reward names the context and a cut prompt's start."""
    from imgalign.rewards.clip import cut_prompts

    r = build_reward("clip")
    n = r.tokenizer.context_length
    fits = "a photo of a red circle"
    long = " ".join(["a red circle to the left of a blue square"] * 4)
    exact = " ".join(["red"] * (n - 2))  # start + n-2 words + end: exactly the context
    assert cut_prompts(r.tokenizer, [fits, long, exact, " ".join(["red"] * (n - 1))]) == [1, 3]
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with caplog.at_level("WARNING"):
        r(x, [fits, fits])
        assert "context" not in caplog.text
        r(x, [fits, long])
        r(x, [long, long])
    (msg,) = [m for m in caplog.messages if "context" in m]
    assert f"its {n}-token context are cut" in msg
    # the prompt's start only (the whole of a 300-token prompt filled the terminal)
    assert msg.endswith(
        "e.g. 'a red circle to the left of a blue square a red circle to the left of a blue square a "
        "red circle ...'"
    )
    assert cut_prompts(object(), [long]) == []  # no encode / context_length: not judged


def test_hub_names_pass_the_name_check_and_dotted_or_tilde_names_are_missing_folders(tmp_path: Path) -> None:
    """check_open_clip_name leaves hf-hub: ids to open_clip (their '/' is no folder path); a name starting with
    '.' or '~' that is no folder is a missing folder (FileNotFoundError), not a misspelt architecture."""
    from imgalign.rewards.clip import check_open_clip_name

    check_open_clip_name("hf-hub:timm/ViT-B-16-SigLIP", None)
    for name in ("~no-such-clip", ".no-such-clip"):
        with pytest.raises(FileNotFoundError, match=re.escape(f"open_clip model '{name}': no such folder")):
            check_open_clip_name(name, None)


def test_a_misspelt_architecture_lists_three_close_names() -> None:
    """The error names up to three close architectures, not only the closest."""
    from imgalign.rewards.clip import check_open_clip_name

    with pytest.raises(ValueError, match=r"\(close: ViT-B-32, [\w-]+, [\w-]+\); give one") as e:
        check_open_clip_name("vit-b-23", "openai")
    assert "pretrained='openai'" in str(e.value)


def test_openai_weights_are_built_with_quick_gelu(monkeypatch: pytest.MonkeyPatch) -> None:
    """load_open_clip hands _quick_gelu's answer to open_clip.create_model (open_clip itself only warns)."""
    import open_clip

    from imgalign.rewards.clip import load_open_clip

    class Stop(Exception):
        pass

    seen: dict = {}

    def create_model(name: str, **kw) -> None:
        seen[name] = kw
        raise Stop  # before any weights are read

    monkeypatch.setattr(open_clip, "create_model", create_model)
    for tag, quick in (("openai", True), ("laion2b_s34b_b79k", False)):
        with pytest.raises(Stop):
            load_open_clip(f"ViT-B-32@{tag}", torch.device("cpu"), torch.float16)
        assert seen["ViT-B-32"]["force_quick_gelu"] is quick
        assert seen["ViT-B-32"]["pretrained"] == tag and seen["ViT-B-32"]["precision"] == "fp16"


@pytest.mark.parametrize("weight", ["0", "-2.5"])
def test_a_weight_that_is_not_positive_is_refused_before_the_model_loads(weight: str, monkeypatch) -> None:
    """weight=0 made every score 0 and a negative one ranked the worst-matching image best, silently."""
    import imgalign.rewards.clip as clip_mod

    def no_load(*args: object) -> None:
        raise AssertionError("the model loaded before the options were checked")

    monkeypatch.setattr(clip_mod, "load_open_clip", no_load)
    with pytest.raises(ValueError, match=f"clip reward: weight must be > 0, got {weight}"):
        build_reward(f"clip:weight={weight}")


def test_a_missing_org_name_model_is_named_as_a_possible_hub_id() -> None:
    """clip:model=openai/clip-vit-base-patch32 (a transformers Hub id) said only "no such folder"; a path that cannot
    be a Hub id gets no such hint."""
    from imgalign.rewards.clip import load_open_clip

    with pytest.raises(FileNotFoundError) as e:
        load_open_clip("openai/clip-vit-base-patch32", torch.device("cpu"), torch.float32, None)
    assert (
        "no such folder (a Hub id? open_clip reads an open_clip repo as hf-hub:openai/clip-vit-base-patch32; "
        in str(e.value)
        and "pretrained=openai, e.g. ViT-B-32)" in str(e.value)
    )
    with pytest.raises(FileNotFoundError) as e:
        load_open_clip("./no/such", torch.device("cpu"), torch.float32, None)
    assert "no such folder; give a folder" in str(e.value)


# ---- transformers CLIPs (openai/clip-vit-*, PickScore) ------------------------------------------------------
@pytest.fixture(scope="module")
def hf_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from imgalign.trainers.testing import tiny_transformers_clip

    return tiny_transformers_clip(tmp_path_factory.mktemp("hfclip") / "clip")


def _transformers_cosines(folder: Path, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """The cosines transformers' own processor and model give for [0, 1] images (B, 3, H, W) at 8-bit values."""
    from PIL import Image
    from transformers import CLIPModel, CLIPProcessor

    model, proc = CLIPModel.from_pretrained(folder).eval(), CLIPProcessor.from_pretrained(folder)
    pil = [Image.fromarray((x.permute(1, 2, 0) * 255).round().byte().numpy()) for x in images]
    with torch.no_grad():
        out = model(**proc(text=prompts, images=pil, padding=True, return_tensors="pt"))
    return (out.image_embeds * out.text_embeds).sum(-1)


@pytest.mark.parametrize("hw", [(32, 32), (48, 40)])
def test_a_transformers_clip_scores_as_its_own_processor_and_model_do(hf_clip: Path, hw) -> None:
    """clip:model=FOLDER of a transformers CLIPModel (before: "no open_clip_config.json, so it is no open_clip
    model"): the cosines of transformers' CLIPProcessor + CLIPModel, through the image processor's resize of the
    shortest edge and centre crop (which differ from the 8-bit PIL path by its rounding only)."""
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(3, 3, *hw, generator=g) * 255).round() / 255
    prompts = ["a red circle", "two blue squares", "a green cross left of a circle"]
    out = build_reward(f"clip:model={hf_clip},batch_size=2")(x, prompts)
    ref = _transformers_cosines(hf_clip, x, prompts)
    tol = 1e-5 if hw == (32, 32) else 2e-2
    assert [d["cosine"] for d in out.details] == pytest.approx(ref.tolist(), abs=tol)
    assert out.scores.tolist() == pytest.approx((CLIPSCORE_W * ref.clamp(min=0)).tolist(), abs=3 * tol)


def test_a_transformers_clip_without_a_processor_takes_one_from_processor_and_says_so(
    hf_clip: Path, tmp_path: Path
) -> None:
    """PickScore is published without a processor: the folder alone is refused naming processor=, and with
    processor= (its base CLIP's) it scores as the same weights with their own processor."""
    from imgalign.trainers.testing import tiny_transformers_clip

    bare = tiny_transformers_clip(tmp_path / "bare", processor=False)
    with pytest.raises(
        ValueError, match=rf"processor of transformers CLIP '{bare}'.*takes processor=FOLDER_OR_HUB"
    ):
        build_reward(f"clip:model={bare}")
    x, prompts = torch.rand(2, 3, 32, 32), ["a red circle", "a blue square"]
    got = build_reward(f"clip:model={bare},processor={hf_clip}")(x, prompts).scores
    torch.testing.assert_close(got, build_reward(f"clip:model={hf_clip}")(x, prompts).scores)


def test_processor_is_for_transformers_clips_and_pretrained_for_open_clip(
    hf_clip: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="processor= is for transformers CLIPs, and 'shapes-clip' is none"):
        build_reward(f"clip:processor={hf_clip}")
    with pytest.raises(ValueError, match="is a transformers CLIP, which takes no pretrained="):
        build_reward(f"clip:model={hf_clip},pretrained=openai")


def test_a_transformers_clip_warns_of_prompts_past_its_context(hf_clip: Path, caplog) -> None:
    """The tiny tokenizer spells by character: 80 letters with start and end tokens pass the 77-token context."""
    r = build_reward(f"clip:model={hf_clip}")
    r(torch.rand(2, 3, 32, 32), ["a red circle", "a" * 75])
    assert "prompts longer than its" not in caplog.text
    r(torch.rand(1, 3, 32, 32), ["b" * 76])
    assert "prompts longer than its 77-token context are cut" in caplog.text


def test_a_transformers_clip_hub_id_in_the_local_cache_is_read_as_one(
    hf_clip: Path, tmp_path: Path, monkeypatch
) -> None:
    """ORG/NAME of a transformers CLIP in the Hub cache loads offline (before: "a Hub id? open_clip reads ...");
    one not downloaded keeps the open_clip message, and another model type is no transformers CLIP."""
    import json
    import shutil

    from huggingface_hub import constants

    from imgalign.rewards.clip import transformers_clip_config

    snap = tmp_path / "models--org--tiny-clip" / "snapshots" / "abc123"
    shutil.copytree(hf_clip, snap)
    (tmp_path / "models--org--tiny-clip" / "refs").mkdir()
    (tmp_path / "models--org--tiny-clip" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    assert transformers_clip_config("org/tiny-clip")["model_type"] == "clip"
    x, prompts = torch.rand(2, 3, 32, 32), ["a red circle", "a blue square"]
    torch.testing.assert_close(
        build_reward("clip:model=org/tiny-clip")(x, prompts).scores,
        build_reward(f"clip:model={hf_clip}")(x, prompts).scores,
    )
    assert transformers_clip_config("org/never-downloaded") is None
    with pytest.raises(FileNotFoundError, match="a Hub id"):
        build_reward("clip:model=org/never-downloaded")
    (snap / "config.json").write_text(json.dumps({"model_type": "siglip"}))
    assert transformers_clip_config("org/tiny-clip") is None and transformers_clip_config(str(snap)) is None


def test_a_long_prompt_without_spaces_is_named_by_its_start_in_the_warning(caplog) -> None:
    """A prompt without spaces (Chinese or Japanese text, one long run) was named as "..." alone: textwrap.shorten
    drops a word that does not fit whole. Its first characters are shown."""
    from imgalign.rewards.base import excerpt

    r = build_reward("clip")
    long = "红色的圆形在蓝色的正方形左边" * 20
    x = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with caplog.at_level("WARNING"):
        r(x, [long])
    (msg,) = [m for m in caplog.messages if "context" in m]
    assert msg.endswith(f"e.g. '{long[:96]} ...'")
    assert excerpt("a  b\n c") == "a b c"  # one line
    assert excerpt("x" * 100) == "x" * 100  # fits: kept whole
    assert excerpt("x" * 101) == "x" * 96 + " ..."  # 100 characters with the mark
    assert excerpt("ab " + "x" * 200, 10) == "ab xxx ..."  # the only word boundary is too early: cut mid-word
    assert excerpt("abcd efgh ijkl", 12) == "abcd ..."  # a boundary in the second half: cut there
