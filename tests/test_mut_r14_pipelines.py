"""imgalign.pipelines: behaviour no other test pinned down (mutation round 14): the weight-file checks on files with
metadata, several tensors or a long header, the advice for an incomplete checkpoint folder, the hint past an
interrupted write's ``.old`` folder, and the log filters' texts."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from imgalign.trainers.testing import stub_pipeline_folder


def _cut(path: Path, n: int) -> int:
    """Cut the last `n` bytes of a file; returns its whole size."""
    whole = path.read_bytes()
    path.write_bytes(whole[:-n])
    return len(whole)


def test_a_cut_short_weights_file_is_found_with_metadata_a_long_header_or_in_its_last_tensor(tmp_path):
    """diffusers writes ``__metadata__`` in every header; a header past 100 bytes (any real model) is read; the end
    of the data is the last tensor's end, not the first's."""
    from safetensors.torch import save_file

    from imgalign.pipelines import truncated_weights

    files = {
        "meta.safetensors": ({"w": torch.zeros(16)}, {"format": "pt"}),
        "long.safetensors": ({f"block_{i:02d}.weight": torch.zeros(4) for i in range(8)}, None),
        "two.safetensors": ({"a": torch.zeros(16), "b": torch.zeros(16)}, None),
    }
    for name, (tensors, meta) in files.items():
        save_file(tensors, str(tmp_path / name), metadata=meta)
    assert int.from_bytes((tmp_path / "long.safetensors").read_bytes()[:8], "little") > 100
    assert truncated_weights(tmp_path) == []
    sizes = {name: _cut(tmp_path / name, 8) for name in files}
    assert truncated_weights(tmp_path) == [
        f"the rest of {tmp_path.name}/{name} ({sizes[name] - 8} of {sizes[name]} bytes there: truncated)"
        for name in sorted(files)
    ]


def test_a_weights_file_cut_inside_its_header_is_named_but_a_git_lfs_pointer_is_left_to_diffusers(tmp_path):
    """A copy cut inside the header (the first few hundred bytes) failed with "Unable to load weights from
    checkpoint file" and no reason; a Git LFS pointer (a clone without git-lfs) is left to diffusers, whose message
    says to run `git lfs pull`, and a stub shorter than 8 bytes to the other checks."""
    from safetensors.torch import save_file

    from imgalign.pipelines import truncated_weights

    f = tmp_path / "w.safetensors"
    save_file({f"block_{i:02d}.weight": torch.zeros(4) for i in range(8)}, str(f))
    n = int.from_bytes(f.read_bytes()[:8], "little")
    f.write_bytes(f.read_bytes()[:60])
    assert truncated_weights(tmp_path) == [
        f"the rest of {tmp_path.name}/w.safetensors (60 of more than {8 + n} bytes there: truncated)"
    ]
    f.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 12345\n")
    assert truncated_weights(tmp_path) == []
    f.write_text("x")
    assert truncated_weights(tmp_path) == []


def test_an_incomplete_training_checkpoint_pipeline_says_to_use_another_checkpoint(tmp_path):
    """A full fine-tune's checkpoint (its pipeline beside trainer_state/) missing a part is fixed by another
    checkpoint of the run or a resume, not by recreating it with save_pretrained."""
    import imgalign.pipelines as P

    ckpt = stub_pipeline_folder(tmp_path / "step-000004", {"transformer": ["config.json"]})
    (ckpt / "trainer_state").mkdir()
    with pytest.raises(P.IncompleteModelError) as info:
        P.check_pipeline_folder(ckpt)
    assert str(info.value).endswith(
        "missing: transformer/ weights (*.safetensors); it is a training checkpoint: use another checkpoint of "
        "the run, or resume the run to write it again"
    )


def test_the_pipeline_folder_inside_is_named_but_not_an_old_copy(tmp_path):
    """A folder whose only pipeline is a ``.old`` copy (left by an interrupted replace) gets no hint to give it."""
    import imgalign.pipelines as P

    (tmp_path / "out" / "model.old").mkdir(parents=True)
    (tmp_path / "out" / "model.old" / "model_index.json").write_text("{}")
    with pytest.raises(P.IncompleteModelError) as info:
        P.check_pipeline_folder(tmp_path / "out")
    assert "is not a diffusers pipeline folder" in str(info.value) and "it holds" not in str(info.value)
    (tmp_path / "out" / "model").mkdir()
    (tmp_path / "out" / "model" / "model_index.json").write_text("{}")
    with pytest.raises(
        P.IncompleteModelError, match=r"it holds the pipeline folder '.*out/model': give that$"
    ):
        P.check_pipeline_folder(tmp_path / "out")


def test_an_existing_path_after_an_empty_label_is_labelled_by_its_name(tmp_path, monkeypatch):
    from imgalign.pipelines import ModelSpec, parse_model_arg

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "step-2").mkdir(parents=True)
    assert parse_model_arg("=runs/step-2") == ModelSpec("step-2", "runs/step-2")


def test_a_transformer_folder_with_a_stray_empty_transformer_subfolder_is_a_transformer(tmp_path):
    from imgalign.pipelines import overlay_kind

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "transformer").mkdir()
    assert overlay_kind(tmp_path) == "transformer"


def test_a_component_written_as_null_is_absent_too(tmp_path):
    """``null`` for a component (not only ``[null, null]``) is passed on as None."""
    from imgalign.pipelines import absent_components

    index = {"_class_name": "X", "text_encoder_3": None, "vae": ["diffusers", "AutoencoderKL"]}
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    assert absent_components(tmp_path) == {"text_encoder_3": None}


def _records_through(logger_name: str, messages: list[str]) -> list[str]:
    """The messages of `messages` that pass the filters of the named logger (as its handlers would see them)."""
    logger = logging.getLogger(logger_name)
    return [
        m
        for m in messages
        if logger.filter(logging.LogRecord(logger_name, logging.WARNING, __file__, 1, m, None, None))
    ]


def test_diffusers_absent_component_save_warning_is_dropped_and_others_pass():
    """diffusers' own text for each absent part on save_pretrained (pipeline_utils.py)."""
    import imgalign.pipelines as P

    said = "self.text_encoder_3=None of type <class 'NoneType'> cannot be saved."
    other = "self.vae=AutoencoderKL() of type <class 'AutoencoderKL'> cannot be saved."
    with P.quiet_absent_components():
        assert _records_through("diffusers.pipelines.pipeline_utils", [said, other]) == [other]


def test_the_text_encoder_lora_warning_stays_for_a_file_with_te_prefixed_keys(tmp_path):
    """Keys starting ``te_`` are text-encoder weights, as the check reads them (with ``text_encoder`` and
    ``lora_te``): diffusers' warning about them is kept."""
    from safetensors.torch import save_file

    import imgalign.pipelines as P

    save_file({"te_text_model.q.lora_A.weight": torch.zeros(1)}, str(tmp_path / P.LORA_FILES[0]))
    said = "No LoRA keys associated to CLIPTextModelWithProjection found"
    with P.quiet_text_encoder_lora_warning(tmp_path):
        assert _records_through("diffusers.loaders.lora_base", [said]) == [said]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[]", "not a JSON object"),
        ('{"_class_name": "StableDiffusion3Pipeline",', "not valid JSON (Expecting property name"),
        (b"\xff\xfe", "not valid JSON ('utf-8' codec can't decode byte 0xff"),
    ],
)
def test_a_damaged_model_index_is_named_with_what_to_do(tmp_path, capsys, text, why):
    """A model_index.json that is a list raised AttributeError (a traceback from `grid`, `eval`, `train`), and one
    cut short printed only json's "Expecting property name ...", naming no file."""
    import imgalign.pipelines as P
    from imgalign.cli import main

    index = tmp_path / "m" / "model_index.json"
    index.parent.mkdir()
    index.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(P.IncompleteModelError) as info:
        P.check_model_spec(P.ModelSpec("m", str(index.parent)))
    assert str(info.value).startswith(f"{index} is damaged: {why}")
    fix = "recreate it (save_pretrained, or `imgalign world pretrain --component t2i` for a shapes model)"
    assert str(info.value).endswith(f"; {fix}")
    (index.parent / "trainer_state").mkdir()  # a full fine-tune's checkpoint
    with pytest.raises(
        P.IncompleteModelError, match="is damaged: .*it is a training checkpoint: use another"
    ):
        P.check_pipeline_folder(index.parent)
    argv = ["grid", "--model", f"a={index.parent}", "--prompt", "x", "--out", str(tmp_path / "g.png")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"imgalign grid: error: {index} is damaged: " in err and "Traceback" not in err


def test_a_checkpoint_record_that_is_not_utf8_is_named(tmp_path, capsys):
    """An imgalign_model.json of other bytes printed only "'utf-8' codec can't decode byte 0xff ...", naming no file."""
    from imgalign.cli import main

    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "adapter_config.json").write_text("{}")
    (tmp_path / "ck" / "imgalign_model.json").write_bytes(b"\xff\xfe")
    argv = ["grid", "--model", f"a={tmp_path / 'ck'}", "--prompt", "x", "--out", str(tmp_path / "g.png")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        f"{tmp_path / 'ck' / 'imgalign_model.json'}: not a JSON object; expected {{'base_model': ...}}" in err
    )


def test_a_lora_checkpoint_is_fused_into_the_base(tmp_path):
    """A diffusers LoRA file is fused into the base's weights once loaded: sampling runs the plain layers, not the
    base and the LoRA side by side at every step."""
    from imgalign import hub
    from imgalign.adapters import load_adapter
    from imgalign.pipelines import load_pipeline

    a = load_adapter("shapes")
    a.add_lora(2, 4.0)
    a.save(tmp_path / "ck", base_model=str(hub.resolve("shapes")))
    pipe = load_pipeline(str(tmp_path / "ck"))
    layers = [m for m in pipe.transformer.modules() if hasattr(m, "merged")]
    assert pipe.num_fused_loras == 1 and layers and all(m.merged for m in layers)
