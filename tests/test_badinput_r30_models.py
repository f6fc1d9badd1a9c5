"""Bad-input round 30: a model folder of another library where a transformers model or a CLIP is asked for (GenEval's
--detector and --clip, the geneval reward's detector, vlm_loglik's model, the dinov2: feature encoder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign import hub


def _folder(root: Path, name: str, files: dict[str, object]) -> Path:
    """A folder holding `files` (name -> JSON content): the config files that say what a model folder is."""
    folder = root / name
    folder.mkdir()
    for file, content in files.items():
        (folder / file).write_text(json.dumps(content))
    return folder


UNRECOGNIZED = "Unrecognized model in {}. Should have a `model_type` key in its config.json."


@pytest.mark.parametrize(
    "files, said",
    [
        (
            {"model_index.json": {"_class_name": "StableDiffusion3Pipeline"}},
            "it holds a diffusers pipeline (model_index.json), not a transformers model",
        ),
        (
            {"open_clip_config.json": {"model_cfg": {}}},
            "it holds an open_clip model (open_clip_config.json), not a transformers model",
        ),
        (
            {"config.json": {"_class_name": "SD3Transformer2DModel", "num_layers": 1}},
            "it holds a diffusers SD3Transformer2DModel (one part of a pipeline), not a transformers model",
        ),
    ],
)
def test_a_folder_of_another_library_is_named_not_sent_to_edit_its_config_json(
    tmp_path: Path, files: dict[str, object], said: str
) -> None:
    """`--detector PIPELINE_FOLDER` (or an open_clip folder, or a pipeline's transformer/) said transformers'
    "Unrecognized model in DIR. Should have a `model_type` key in its config.json", of a folder with no config.json
    at all (or a diffusers one): the reason now says what the folder holds."""
    folder = _folder(tmp_path, "model", files)
    assert hub.load_error_reason(ValueError(UNRECOGNIZED.format(folder)), str(folder)) == said
    line = hub.cannot_load(f"detector {str(folder)!r}", ValueError(UNRECOGNIZED.format(folder)), str(folder))
    assert line.startswith(
        f"cannot load detector {str(folder)!r}: {said}. Give a folder saved with save_pretrained"
    )


def test_a_transformers_config_without_model_type_keeps_the_librarys_reason(tmp_path: Path) -> None:
    """A config.json that is neither a diffusers part's nor carries a model_type: the library's text is the reason
    (editing that config.json may be the fix)."""
    folder = _folder(tmp_path, "model", {"config.json": {"hidden_size": 8}})
    reason = hub.load_error_reason(ValueError(UNRECOGNIZED.format(folder)), str(folder))
    assert reason == UNRECOGNIZED.format(folder).rstrip(".")


def test_geneval_detector_given_a_pipeline_folder_names_it_before_generation(tmp_path: Path) -> None:
    """`eval --suite geneval --detector SD3_PIPELINE_FOLDER` (the spec check before any image is generated)."""
    from imgalign.eval.real import check_judge_specs

    pipe = _folder(tmp_path, "sd3", {"model_index.json": {"_class_name": "StableDiffusion3Pipeline"}})
    with pytest.raises(FileNotFoundError) as info:
        check_judge_specs(str(pipe), "ViT-L-14:openai")
    assert str(info.value) == (
        f"cannot load detector {str(pipe)!r}: it holds a diffusers pipeline (model_index.json), not a transformers "
        "model. Give a folder saved with save_pretrained or a Hub id already downloaded (the Hub is not contacted "
        "when HF_HUB_OFFLINE=1)"
    )


def test_vlm_loglik_given_an_open_clip_folder_names_it(tmp_path: Path) -> None:
    """`--reward vlm_loglik:model=OPEN_CLIP_FOLDER`: transformers' "Should have a `model_type` key" before."""
    from imgalign.rewards.base import build_reward

    folder = _folder(tmp_path, "oclip", {"open_clip_config.json": {"model_cfg": {}}})
    with pytest.raises(ValueError) as info:
        build_reward(f"vlm_loglik:model={folder}")
    assert str(info.value) == (
        f"vlm_loglik: cannot load {str(folder)!r} as a VLM (it holds an open_clip model (open_clip_config.json), "
        "not a transformers model); give a local save_pretrained folder of a VLM, a cached Hub id, or shapes-vlm"
    )


def test_geneval_clip_given_a_pipeline_folder_says_what_to_give(tmp_path: Path) -> None:
    """`eval --suite geneval --clip SD3_PIPELINE_FOLDER` said only "CLIP folder ... has no open_clip_config.json":
    neither that a transformers CLIP is taken too, nor what to give."""
    from geneval_real_tiny import build_tiny_detr

    from imgalign.eval.real import check_judge_specs

    detr = build_tiny_detr(tmp_path / "detr")
    pipe = _folder(tmp_path, "sd3", {"model_index.json": {"_class_name": "StableDiffusion3Pipeline"}})
    with pytest.raises(FileNotFoundError) as info:
        check_judge_specs(str(detr), str(pipe))
    assert str(info.value) == (
        f"CLIP folder {str(pipe)!r} has no open_clip_config.json, and no config.json of a transformers CLIP "
        "(model_type 'clip'): give an open_clip folder, a transformers CLIP folder, or ARCH:PRETRAINED (e.g. "
        "ViT-L-14:openai)"
    )
