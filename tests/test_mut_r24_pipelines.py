"""Round 24 mutation survivors of imgalign/pipelines.py: tests that pin the behaviour the surviving mutants changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign.pipelines import (
    IncompleteModelError,
    ModelSpec,
    check_pipeline_folder,
    overlay_kind,
    parse_model_arg,
)


def test_an_existing_folder_with_equals_and_plus_in_its_name_is_labelled_by_its_last_part(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "lr=1e-4+ft"
    folder.mkdir()
    assert parse_model_arg(str(folder)) == ModelSpec("lr=1e-4+ft", str(folder))


def test_label_equals_an_existing_folder_with_a_plus_in_its_name_is_that_folder_not_base_plus_overlay(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "shapes+ft"
    folder.mkdir()
    assert parse_model_arg(f"mine={folder}") == ModelSpec("mine", str(folder))
    assert parse_model_arg(f" mine = {folder} ") == ModelSpec("mine", str(folder))


def test_a_folder_holding_only_a_diffusers_lora_bin_file_is_a_lora(tmp_path: Path) -> None:
    (tmp_path / "pytorch_lora_weights.bin").write_bytes(b"\0")
    assert overlay_kind(tmp_path) == "lora"


def test_a_run_folder_without_checkpoints_yet_says_it_has_none(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(IncompleteModelError) as e:
        check_pipeline_folder(run)
    assert str(e.value) == (
        f"{str(run)!r} is a training run folder, not a model; give one of its checkpoints (it has none yet)"
    )


def test_a_pipeline_folder_that_also_holds_step_folders_is_a_model_not_a_run(tmp_path: Path) -> None:
    """Only a folder without model_index.json is read as a run's checkpoints/ for its step-* subfolders."""
    (tmp_path / "model_index.json").write_text('{"_class_name": "StableDiffusion3Pipeline"}')
    (tmp_path / "step-000010").mkdir()
    check_pipeline_folder(tmp_path)


def test_a_shard_index_without_a_weight_map_names_no_missing_shard(tmp_path: Path) -> None:
    from imgalign.pipelines import missing_shards

    (tmp_path / "diffusion_pytorch_model.safetensors.index.json").write_text('{"metadata": {}}')
    assert missing_shards(tmp_path) == []


@pytest.mark.parametrize("entry", [[], ["diffusers"], ["diffusers", "AutoencoderKL", "x"]])
def test_a_component_entry_that_is_no_library_class_pair_is_named_as_damage(
    tmp_path: Path, entry: list
) -> None:
    """A hand-edited model_index.json with ``"vae": []`` failed with a bare IndexError; any entry that is not a
    [library, class] pair is named, with what to do."""
    import json

    index = tmp_path / "model_index.json"
    index.write_text(json.dumps({"_class_name": "StableDiffusion3Pipeline", "vae": entry}))
    with pytest.raises(IncompleteModelError) as e:
        check_pipeline_folder(tmp_path)
    assert str(e.value) == (
        f"{index} is damaged: its 'vae' entry is {entry!r}, not a [library, class] pair; recreate it "
        "(save_pretrained, or `imgalign world pretrain --component t2i` for a shapes model)"
    )


def test_a_weights_file_holding_only_metadata_is_not_named_as_cut(tmp_path: Path) -> None:
    from imgalign.pipelines import truncated_weights

    header = b'{"__metadata__": {"format": "pt"}}'
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    assert truncated_weights(tmp_path) == []


def test_an_overlay_given_as_a_file_is_named_as_a_file_not_as_missing(tmp_path: Path) -> None:
    from imgalign.pipelines import check_model_spec

    weights = tmp_path / "pytorch_lora_weights.safetensors"
    weights.write_bytes(b"\0")
    with pytest.raises(IncompleteModelError) as e:
        check_model_spec(ModelSpec("ft", "shapes", str(weights)))
    assert str(e.value) == (
        f"model 'ft': fine-tuned folder {str(weights)!r} is a file; give the folder a training run saved (a "
        "checkpoint)"
    )


def test_a_transformer_overlay_of_another_size_on_the_embedded_base_is_refused_before_loading(
    tmp_path: Path,
) -> None:
    """The embedded base is read from its folder (not a path named 'shapes'): a transformer with other channels is
    refused by name before anything loads."""
    import json

    from imgalign.pipelines import check_model_spec

    (tmp_path / "config.json").write_text(
        json.dumps({"_class_name": "SD3Transformer2DModel", "in_channels": 16})
    )
    header = b'{"__metadata__": {"format": "pt"}}'
    (tmp_path / "diffusion_pytorch_model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(
        ValueError, match=r"does not fit base model 'shapes' \(in_channels 16 against the base's 4\)"
    ):
        check_model_spec(ModelSpec("ft", "shapes", str(tmp_path)))


def test_a_fine_tune_of_another_family_on_the_embedded_base_is_refused_before_loading(tmp_path: Path) -> None:
    import json

    from imgalign.pipelines import check_model_spec

    (tmp_path / "adapter_config.json").write_text("{}")
    (tmp_path / "imgalign_model.json").write_text(json.dumps({"family": "flux", "base_model": ""}))
    with pytest.raises(
        ValueError, match=r"is a flux fine-tune \(its imgalign_model.json\), but base model 'shapes' is"
    ):
        check_model_spec(ModelSpec("ft", "shapes", str(tmp_path)))


def test_load_pipeline_loads_an_overlay_in_the_dtype_asked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """BASE+OVERLAY with dtype=bfloat16: the fine-tuned part is put on the base in bfloat16 too (recorded, nothing
    loads)."""
    import diffusers
    import torch

    from imgalign import pipelines

    class Pipe:
        def to(self, device: str) -> None:
            self.device = device

        def set_progress_bar_config(self, **kw: object) -> None:
            pass

    (tmp_path / "adapter_config.json").write_text("{}")
    calls: list[tuple[Path, torch.dtype, str]] = []
    monkeypatch.setattr(diffusers.DiffusionPipeline, "from_pretrained", lambda folder, **kw: Pipe())
    monkeypatch.setattr(
        pipelines,
        "apply_overlay",
        lambda pipe, path, dtype=torch.float32, base="": calls.append((path, dtype, base)),
    )
    pipelines.load_pipeline(f"ft=shapes+{tmp_path}", device="meta", dtype=torch.bfloat16)
    assert calls == [(tmp_path, torch.bfloat16, "shapes")]
