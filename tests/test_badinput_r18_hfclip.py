"""Bad-input round 18b: transformers CLIP support (the clip reward, the ``clip:`` feature encoder, GenEval's colour
classifier) given a folder of another transformers model, or a CLIP saved without its processor."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.rewards import build_reward
from imgalign.rewards.features import build_features


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """A tiny CLIPModel saved without its processor, and its vision tower alone (a CLIPVisionModel folder)."""
    from transformers import CLIPModel, CLIPVisionModel

    from imgalign.trainers.testing import tiny_transformers_clip

    root = tmp_path_factory.mktemp("hfclip")
    bare = tiny_transformers_clip(root / "bare", processor=False)
    vision = root / "vision"
    CLIPVisionModel(CLIPModel.from_pretrained(bare).config.vision_config).save_pretrained(vision)
    return {"bare": bare, "vision": vision}


def test_a_clip_vision_model_alone_is_named_not_read_as_an_open_clip_folder(folders: dict[str, Path]) -> None:
    """Before: "folder ... has no open_clip_config.json, so it is no open_clip model" (the reward), "CLIP folder
    ... has no open_clip_config.json" (GenEval's --clip), neither naming the model type nor that a transformers
    CLIPModel is taken."""
    from geneval_real_tiny import build_tiny_detr

    from imgalign.eval.real import ClipColorClassifier, check_judge_specs

    vision = folders["vision"]
    said = rf"'{vision}' holds a transformers 'clip_vision_model' model, not a CLIPModel \(model_type 'clip'"
    with pytest.raises(ValueError, match=f"clip reward: {said}"):
        build_reward(f"clip:model={vision}")
    with pytest.raises(ValueError, match=f"feature encoder 'clip:{vision}': {said}"):
        build_features(f"clip:{vision}")
    with pytest.raises(ValueError, match=said):
        ClipColorClassifier(str(vision))
    detr = build_tiny_detr(vision.parent / "detr")
    with pytest.raises(ValueError, match=said):
        check_judge_specs(str(detr), str(vision))


def test_an_open_clip_folder_with_a_transformers_config_is_still_open_clip(tmp_path: Path) -> None:
    """open_clip folders on the Hub carry a config.json too: one with open_clip_config.json is no other model."""
    from imgalign.rewards.clip import other_transformers_model

    (tmp_path / "config.json").write_text('{"model_type": "clip_vision_model"}')
    assert other_transformers_model("x", str(tmp_path)) is not None
    (tmp_path / "open_clip_config.json").write_text("{}")
    assert other_transformers_model("x", str(tmp_path)) is None


def test_a_processorless_clip_is_said_plainly_and_each_caller_says_its_own_way(
    folders: dict[str, Path],
) -> None:
    """Before: transformers' text of huggingface.co and "a local directory with the same name", and the clip:
    feature encoder and the colour classifier told the user to give processor=, which neither takes."""
    from imgalign.eval.real import ClipColorClassifier

    bare = folders["bare"]
    none = rf"folder '{bare}' has none \(no preprocessor_config.json or processor_config.json\)"
    with pytest.raises(ValueError, match=f"{none}; a model saved without one takes processor=") as e:
        build_reward(f"clip:model={bare}")
    assert "huggingface.co" not in str(e.value)
    for make in (lambda: build_features(f"clip:{bare}"), lambda: ClipColorClassifier(str(bare))):
        with pytest.raises(ValueError, match=f"{none}; .* takes no processor=: save its base CLIP's") as e:
            make()
        assert "takes processor=" not in str(e.value)
    with pytest.raises(ValueError, match=rf"folder '{folders['vision']}' has none"):
        build_reward(f"clip:model={bare},processor={folders['vision']}")


def test_a_clip_whose_config_does_not_fit_its_weights_is_one_line_naming_the_folder(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    """A config.json edited or copied from another size (here the vision image_size, so the position embeddings
    differ): before, a RuntimeError traceback advising ignore_mismatched_sizes, a loader argument no option sets."""
    import json
    import shutil

    folder = tmp_path / "edited"
    shutil.copytree(folders["bare"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["vision_config"]["image_size"] = 48
    (folder / "config.json").write_text(json.dumps(config))
    said = (
        rf"cannot load transformers CLIP '{folder}': its weights do not fit the shapes its config.json gives;"
    )
    with pytest.raises(ValueError, match=said) as e:
        build_reward(f"clip:model={folder}")
    assert "ignore_mismatched_sizes" not in str(e.value)
    with pytest.raises(ValueError, match=said):
        build_features(f"clip:{folder}")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_resizes_images_not_of_the_input_size(
    folders: dict[str, Path], tmp_path: Path, dtype
) -> None:
    """Before: NotImplementedError "compute_index_ranges_weights" not implemented for 'BFloat16' from torch's
    antialiased resize on the CPU, for a transformers CLIP's processor steps and open_clip's alike; now the resize
    runs in float32 and gives the float32 pixels in the half dtype."""
    import torch
    from transformers import CLIPImageProcessor

    from imgalign.rewards.features import clip_preprocess, image_processor_transform
    from imgalign.trainers.testing import tiny_transformers_clip

    half = getattr(torch, dtype)
    x = torch.rand(2, 3, 48, 40)
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    ref = clip_preprocess(x, 32, mean, std)
    got = clip_preprocess(x.to(half), 32, mean, std)
    assert got.dtype == half and got.shape == ref.shape
    torch.testing.assert_close(got.float(), ref, atol=0.05, rtol=0)
    proc = CLIPImageProcessor.from_pretrained(
        tiny_transformers_clip(tmp_path / "clip", image_size=40, crop=32)
    )
    ref = image_processor_transform(proc, "x", "cpu", torch.float32)(x)
    got = image_processor_transform(proc, "x", "cpu", half)(x.to(half))
    assert got.dtype == half and got.shape == ref.shape == (2, 3, 32, 32)
    torch.testing.assert_close(got.float(), ref, atol=0.05, rtol=0)


def test_a_processor_of_another_image_size_is_refused_at_load(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    """processor= of a CLIP with 48-pixel inputs for 32-pixel weights: before, the reward loaded and every image
    then failed when scored ("Input image size (48*48) doesn't match model (32*32)")."""
    from imgalign.trainers.testing import tiny_transformers_clip

    big = tiny_transformers_clip(tmp_path / "big", image_size=48)
    with pytest.raises(
        ValueError, match=r"the processor from .*big' makes 48x48 pixels and the model takes 32x32"
    ):
        build_reward(f"clip:model={folders['bare']},processor={big}")


def test_a_clip_folder_whose_config_is_not_json_is_named(tmp_path) -> None:
    """A transformers CLIP folder with a cut config.json was read as an open_clip name and told it has no
    open_clip_config.json; its config file is named as damaged."""
    from imgalign.trainers.testing import tiny_transformers_clip

    folder = tiny_transformers_clip(tmp_path / "clip")
    (folder / "config.json").write_text('{"model_type": "cl')
    with pytest.raises(ValueError, match=r"config.json cannot be read as JSON .*restore the model's own"):
        build_reward(f"clip:model={folder}")


def test_the_judge_check_refuses_a_clip_or_detector_folder_without_weights_or_processor(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    """``eval --suite geneval``'s check before generating passed a transformers CLIP folder with no weights file or
    no processor, or a detector folder with no weights; the judge failed when it was built, after the whole
    generation."""
    import shutil

    from geneval_real_tiny import build_tiny_detr

    from imgalign.eval.real import check_judge_specs
    from imgalign.trainers.testing import tiny_transformers_clip

    detr = str(build_tiny_detr(tmp_path / "detr"))
    whole = tiny_transformers_clip(tmp_path / "whole")
    check_judge_specs(detr, str(whole))
    with pytest.raises(ValueError, match="has none .*; the colour classifier takes no processor="):
        check_judge_specs(detr, str(folders["bare"]))
    empty = tmp_path / "no-weights"
    shutil.copytree(whole, empty)
    for f in empty.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(FileNotFoundError, match=rf"folder '{empty}' has no weights \(model.safetensors\)"):
        check_judge_specs(detr, str(empty))
    # a CLIP path that is not there was "not a known open_clip ARCH:PRETRAINED pair ..., a folder or hf-hub:"
    gone = tmp_path / "no-such-clip"
    with pytest.raises(FileNotFoundError, match=rf"CLIP '{gone}': no such folder; give an open_clip or"):
        check_judge_specs(detr, str(gone))
    with pytest.raises(FileNotFoundError, match=r"CLIP '~/x': no such folder \(a quoted ~ is not expanded"):
        check_judge_specs(detr, "~/x")
    with pytest.raises(ValueError, match="CLIP 'ViT-Q:openai' is not a known open_clip ARCH:PRETRAINED pair"):
        check_judge_specs(detr, "ViT-Q:openai")
    for f in Path(detr).glob("*.safetensors"):  # a detector folder with its config but no weights
        f.unlink()
    with pytest.raises(FileNotFoundError, match=rf"detector '{detr}': folder '{detr}' has no weights"):
        check_judge_specs(detr, str(whole))


def test_a_hand_edited_processor_file_is_read_as_transformers_reads_it_or_named(tmp_path: Path) -> None:
    """An image_mean of one number (transformers takes it for all three channels) was reported as "bad options
    ['model']: 'int' object is not iterable"; a processor_config.json holding a JSON list raised an AttributeError
    traceback."""
    import json
    import shutil

    from imgalign.rewards.features import per_channel
    from imgalign.trainers.testing import tiny_transformers_clip

    whole = tiny_transformers_clip(tmp_path / "whole")
    edited = tmp_path / "edited"
    shutil.copytree(whole, edited)
    config = json.loads((edited / "processor_config.json").read_text())
    config["image_processor"]["image_mean"] = 0.5
    (edited / "processor_config.json").write_text(json.dumps(config))
    assert build_reward(f"clip:model={edited}").mean == (0.5, 0.5, 0.5)
    config["image_processor"]["image_mean"] = [0.5, 0.5]
    (edited / "processor_config.json").write_text(json.dumps(config))
    with pytest.raises(
        ValueError, match=r"its image processor's image_mean \(0.5, 0.5\) is not one number or three"
    ):
        build_reward(f"clip:model={edited}")
    assert per_channel(type("P", (), {"image_std": [0.2]})(), "image_std", "x") == (0.2, 0.2, 0.2)
    (edited / "processor_config.json").write_text("[1]")
    with pytest.raises(
        ValueError, match=r"cannot load the processor of transformers CLIP .*'list' object has no"
    ):
        build_reward(f"clip:model={edited}")
