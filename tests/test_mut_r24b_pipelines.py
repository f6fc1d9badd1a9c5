"""Round 24 (second pass) mutation survivors of imgalign/pipelines.py: tests that pin the behaviour they changed."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from imgalign.pipelines import (
    LENGTH_WARNING,
    IncompleteModelError,
    ModelSpec,
    absent_components,
    apply_overlay,
    check_model_spec,
    check_pipeline_folder,
    hub_id_valid,
    length_warning_said,
    load_pipeline,
    lora_mismatch_message,
    missing_shards,
    once_per_call,
    parse_model_arg,
    quiet_absent_components,
    quiet_failed_lora_load,
    quiet_text_encoder_lora_warning,
    recorded_base,
    restore_length_warning,
    warn_other_base,
)


def test_a_base_plus_overlay_spec_reads_back_as_base_plus_overlay() -> None:
    assert str(parse_model_arg("ft=shapes+runs/a/checkpoints/step-4")) == "shapes+runs/a/checkpoints/step-4"
    assert str(ModelSpec("m", "shapes")) == "shapes"


def test_spaces_around_the_plus_of_base_plus_overlay_are_not_part_of_either_path() -> None:
    assert parse_model_arg("ft=shapes + runs/a/step-4") == ModelSpec("ft", "shapes", "runs/a/step-4")


def test_a_folder_whose_config_json_is_a_list_is_called_no_pipeline_not_an_attribute_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(IncompleteModelError, match="is not a diffusers pipeline folder"):
        check_pipeline_folder(tmp_path)


def test_a_shard_index_that_is_a_json_list_is_named_as_no_index(tmp_path: Path) -> None:
    part = tmp_path / "transformer"
    part.mkdir()
    (part / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(["a.safetensors"]))
    assert missing_shards(part) == [
        "transformer/diffusion_pytorch_model.safetensors.index.json (not a JSON index)"
    ]


def test_a_lora_folder_given_before_the_plus_says_the_base_comes_first(tmp_path: Path) -> None:
    lora = tmp_path / "lora"
    lora.mkdir()
    (lora / "pytorch_lora_weights.safetensors").write_bytes(b"\0")
    with pytest.raises(ValueError, match=f"the base model comes first: ft=shapes\\+{lora}"):
        check_model_spec(ModelSpec("ft", str(lora), "shapes"))


def test_a_checkpoint_whose_transformer_subfolder_has_no_weights_is_refused_before_the_base_loads(
    tmp_path: Path,
) -> None:
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "config.json").write_text("{}")
    with pytest.raises(
        IncompleteModelError, match="fine-tuned transformer folder .* has a config.json but no weights"
    ):
        check_model_spec(ModelSpec("ft", "shapes", str(tmp_path)))


def test_a_damaged_base_record_is_warned_about_and_the_base_given_is_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "imgalign_model.json").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="imgalign.pipelines"):
        warn_other_base("shapes", tmp_path)
    assert "not a JSON object" in caplog.text
    assert "loading it on 'shapes' as given" in caplog.text


def test_a_base_record_that_is_a_json_list_is_named_as_not_a_json_object(tmp_path: Path) -> None:
    (tmp_path / "imgalign_model.json").write_text('["shapes"]')
    with pytest.raises(ValueError, match="imgalign_model.json: not a JSON object"):
        recorded_base(tmp_path)


def test_a_lora_whose_base_record_is_a_json_list_passes_the_check_on_the_base_given(tmp_path: Path) -> None:
    """The record is damaged, so its family is unknown: the base the user gave is checked when it loads."""
    (tmp_path / "pytorch_lora_weights.safetensors").write_bytes(b"\0" * 16)
    (tmp_path / "imgalign_model.json").write_text('["shapes"]')
    spec = ModelSpec("ft", "shapes", str(tmp_path))
    assert check_model_spec(spec) == spec


def test_a_hub_id_is_valid_only_when_spelt_as_one() -> None:
    assert hub_id_valid("stabilityai/stable-diffusion-3.5-medium")
    assert not hub_id_valid("a/b/c")
    assert not hub_id_valid("no spaces/allowed")


def test_a_folder_or_hub_id_without_a_model_index_has_no_absent_components(tmp_path: Path) -> None:
    assert absent_components(tmp_path) == {}
    assert absent_components("org/not-downloaded") == {}


def test_the_long_prompt_line_is_marked_said_for_each_tokenizer_and_put_back_after() -> None:
    said = SimpleNamespace(deprecation_warnings={LENGTH_WARNING: "before"})
    fresh = SimpleNamespace(deprecation_warnings={})
    pipe = SimpleNamespace(tokenizer=fresh, tokenizer_2=said, tokenizer_3=None)
    before = length_warning_said(pipe)
    assert fresh.deprecation_warnings == {LENGTH_WARNING: True}
    assert said.deprecation_warnings == {LENGTH_WARNING: True}
    restore_length_warning(before)
    assert fresh.deprecation_warnings == {}
    assert said.deprecation_warnings == {LENGTH_WARNING: "before"}


def _said(logger: logging.Logger, *messages: str) -> list[str]:
    """The messages of `messages` that `logger`'s filters pass."""
    return [m for m in messages if logger.filter(logging.LogRecord(logger.name, 30, "", 0, m, None, None))]


def test_once_per_call_passes_the_first_matching_record_and_nothing_after_the_block() -> None:
    logger = logging.getLogger("imgalign.test_once_per_call")
    with once_per_call(logger.name, "truncated"):
        assert _said(logger, "a was truncated", "b was truncated", "other") == ["a was truncated", "other"]
    assert _said(logger, "c was truncated", "d was truncated") == ["c was truncated", "d was truncated"]


def test_quiet_absent_components_drops_diffusers_line_for_an_absent_part_only() -> None:
    logger = logging.getLogger("diffusers.pipelines.pipeline_utils")
    line = "self.text_encoder_3=None of type <class 'NoneType'> cannot be saved."
    with quiet_absent_components():
        assert _said(logger, line, "something else") == ["something else"]
    assert _said(logger, line) == [line]


def test_quiet_failed_lora_load_drops_only_the_line_with_the_whole_error() -> None:
    logger = logging.getLogger("diffusers.loaders.peft")
    dropped = "Loading default_0 was unsuccessful with the following error: \nsize mismatch for ..."
    kept = "Loading default_0 was unsuccessful; retrying without the text encoder"
    with quiet_failed_lora_load():
        assert _said(logger, dropped, kept) == [kept]
    assert _said(logger, dropped) == [dropped]


@pytest.mark.parametrize(
    ("key", "dropped"), [("transformer.x.lora_A.weight", True), ("text_encoder.x.lora_A.weight", False)]
)
def test_the_no_text_encoder_keys_warning_is_dropped_only_for_a_lora_without_text_encoder_weights(
    tmp_path: Path, key: str, dropped: bool
) -> None:
    from safetensors.torch import save_file

    save_file({key: torch.zeros(1)}, str(tmp_path / "pytorch_lora_weights.safetensors"))
    logger = logging.getLogger("diffusers.loaders.lora_base")
    line = "No LoRA keys associated to CLIPTextModelWithProjection found with the prefix='text_encoder'"
    with quiet_text_encoder_lora_warning(tmp_path):
        assert _said(logger, line) == ([] if dropped else [line])


class _Pipe:
    """A pipeline stand-in: records where it was moved; its LoRA loader fails like peft's."""

    def __init__(self) -> None:
        self.transformer = torch.nn.Linear(1, 1)
        self.devices: list[object] = []

    def load_lora_weights(self, path: str) -> None:
        raise ValueError("Target modules {'to_q'} not found in the base model.")

    def to(self, device: object) -> None:
        self.devices.append(device)

    def set_progress_bar_config(self, **kwargs: object) -> None:
        pass


def test_peft_refusing_a_lora_names_the_checkpoint_and_the_base(tmp_path: Path) -> None:
    (tmp_path / "pytorch_lora_weights.bin").write_bytes(b"\0")
    with pytest.raises(ValueError, match="does not fit base model 'shapes'.*loader: Target modules"):
        apply_overlay(_Pipe(), tmp_path, base="shapes")


def test_a_lora_mismatch_names_the_loaders_first_mismatching_weight_and_the_recorded_base(
    tmp_path: Path,
) -> None:
    (tmp_path / "imgalign_model.json").write_text(json.dumps({"base_model": "shapes"}))
    error = RuntimeError(
        "Error(s) in loading state_dict for X:\n\tsize mismatch for a.lora_B.weight: 8 vs 4\n\tmore"
    )
    said = lora_mismatch_message(tmp_path, "other", error)
    assert "(loader: Error(s) in loading state_dict for X: size mismatch for a.lora_B.weight: 8 vs 4)" in said
    assert f"give its recorded base (shapes+{tmp_path}) or the checkpoint alone (--model {tmp_path})" in said


def test_load_pipeline_takes_a_path_and_moves_the_pipeline_to_the_device_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import diffusers

    pipe = _Pipe()
    monkeypatch.setattr(diffusers.DiffusionPipeline, "from_pretrained", lambda *a, **k: pipe)
    monkeypatch.chdir(tmp_path)
    assert load_pipeline(Path("shapes"), device="cuda:1") is pipe
    assert pipe.devices == ["cuda:1"]


def test_quiet_failed_lora_load_gives_the_blocks_warnings_only_when_it_succeeds() -> None:
    """A failed LoRA load's warnings (peft's inconsistency note before the size mismatch) are dropped with it; a
    load that goes on gives them as they were."""
    import warnings

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="size mismatch"):
            with quiet_failed_lora_load():
                warnings.warn(
                    "While injecting the PEFT adapters, an inconsistency", RuntimeWarning, stacklevel=1
                )
                raise RuntimeError("size mismatch for x")
        assert said == []
        with quiet_failed_lora_load():
            warnings.warn("kept", UserWarning, stacklevel=1)
        assert [(str(w.message), w.category) for w in said] == [("kept", UserWarning)]
