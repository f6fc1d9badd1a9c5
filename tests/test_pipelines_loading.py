"""imgalign.pipelines and imgalign.hub: the checks and messages behind loading a model, each on its own (mutation
round 11b: behaviour no other test pinned down)."""

from __future__ import annotations

import re

import pytest

from imgalign.trainers.testing import stub_pipeline_folder


def test_an_empty_component_folder_is_named_as_missing_whole(tmp_path):
    """An empty scheduler/ (no weights expected) is missing too, and an empty transformer/ is named as the folder,
    not as its config and weights one by one."""
    import imgalign.pipelines as P

    folder = stub_pipeline_folder(tmp_path / "m", {"transformer": [], "scheduler": []})
    with pytest.raises(P.IncompleteModelError, match=r"missing: transformer/, scheduler/; recreate it"):
        P.check_pipeline_folder(folder)


def test_load_pipeline_passes_the_dtype_and_absent_components_on_and_turns_the_progress_bar_off(monkeypatch):
    """What reaches diffusers' loader (recorded, nothing loads): the resolved folder, the dtype, the components
    model_index.json leaves out as None; then the pipeline goes to the device, its progress bar off."""
    import diffusers
    import torch

    from imgalign.hub import embedded_path
    from imgalign.pipelines import absent_components, load_pipeline

    calls: list[tuple[str, dict]] = []

    class Pipe:
        def to(self, device):
            self.device = device

        def set_progress_bar_config(self, **kw):
            self.progress = kw

    def from_pretrained(folder, **kw):
        calls.append((folder, kw))
        return Pipe()

    monkeypatch.setattr(diffusers.DiffusionPipeline, "from_pretrained", from_pretrained)
    pipe = load_pipeline("shapes", device="meta", dtype=torch.bfloat16)
    folder = str(embedded_path("shapes"))
    assert calls == [(folder, {"dtype": torch.bfloat16, **absent_components(folder)})]
    assert (pipe.device, pipe.progress) == ("meta", {"disable": True})


def test_the_denoiser_is_the_transformer_when_there_is_one_else_the_unet():
    from types import SimpleNamespace

    from imgalign.pipelines import denoiser_name

    assert denoiser_name(SimpleNamespace(transformer=object(), unet=None)) == "transformer"
    assert denoiser_name(SimpleNamespace(transformer=None, unet=object())) == "unet"
    assert denoiser_name(SimpleNamespace(unet=object())) == "unet"


def test_a_lora_mismatch_without_a_base_name_or_a_record_says_so(tmp_path):
    """No base given: 'the given base model'; no imgalign_model.json: the base to give is the one it was trained
    on; an error without text is named by its type."""
    from imgalign.pipelines import lora_mismatch_message

    msg = lora_mismatch_message(tmp_path, "", ValueError(""))
    assert msg == (
        f"LoRA checkpoint {str(tmp_path)!r} does not fit the given base model: it was likely trained on another "
        f"base model; give the base model it was trained on, as BASE+{tmp_path} (loader: ValueError)"
    )


def test_a_missing_absolute_path_gets_no_working_folder_hint(tmp_path):
    """The hint that a relative path is read from the working folder is for relative paths only."""
    import imgalign.pipelines as P

    gone = tmp_path / "gone"
    with pytest.raises(P.IncompleteModelError) as info:
        P.check_model_spec(P.ModelSpec("m", str(gone)))
    assert str(info.value) == (
        f"model 'm': {str(gone)!r} does not exist; give an embedded name (shapes), a pipeline folder or a Hub id "
        "already downloaded"
    )


def test_open_clip_error_lines_are_dropped_only_within_the_block_and_only_open_clips_errors():
    import logging
    import os

    from imgalign.hub import quiet_open_clip_errors

    def record(level: int, path: str) -> logging.LogRecord:
        return logging.LogRecord("x", level, path, 1, "Failed to download weights", None, None)

    oc = os.sep.join(("", "site-packages", "open_clip", "factory.py"))
    other = os.sep.join(("", "site-packages", "timm", "models.py"))
    root = logging.getLogger()
    before = list(root.filters)
    with quiet_open_clip_errors():
        (keep,) = [f for f in root.filters if f not in before]
        assert not keep(record(logging.ERROR, oc)) and not keep(record(logging.CRITICAL, oc))
        assert keep(record(logging.WARNING, oc)) and keep(record(logging.ERROR, other))
    assert root.filters == before


def test_embedded_model_errors_list_the_names_and_say_how_to_get_the_files_back(tmp_path, monkeypatch):
    import imgalign.hub as hub

    with pytest.raises(hub.ModelNotFoundError) as info:
        hub.embedded_path("shapes-nope")
    assert str(info.value) == (
        "'shapes-nope' is not an embedded model; embedded models: shapes, shapes-artifact, shapes-clip, "
        "shapes-t2i, shapes-vlm"
    )
    monkeypatch.setattr(hub, "ASSETS", tmp_path)
    with pytest.raises(
        hub.ModelNotFoundError, match=r"reinstall imgalign or recreate it with `imgalign world"
    ):
        hub.embedded_path("shapes-clip")


def test_load_error_reason_reads_open_clips_download_failure_and_keeps_other_text_without_its_full_stop():
    from imgalign.hub import load_error_reason

    reason = load_error_reason(RuntimeError("Failed to download weights for ViT-B-32."), "ViT-B-32")
    assert reason.startswith("its files are not in the local Hub cache and ")
    assert load_error_reason(ValueError("Unknown model (ViT-X).\n"), None) == "Unknown model (ViT-X)"


def test_environment_variables_are_named_only_as_a_shell_spells_them(monkeypatch):
    """``$HOME``/``${HOME}`` are variables, ``$5`` is not; an unset variable gives no expanded example."""
    from imgalign.hub import names_env_var, tilde_hint

    assert names_env_var("$HOME/x") and names_env_var("${RUNS}/x") and names_env_var("a/$_b")
    assert not names_env_var("runs/cost$5") and not names_env_var("runs/$")
    monkeypatch.setenv("IMGALIGN_T", "/data")
    assert tilde_hint("$IMGALIGN_T/m") == (
        " (environment variables such as $HOME are not expanded: give the full path, '/data/m')"
    )
    monkeypatch.delenv("IMGALIGN_T")
    assert (
        tilde_hint("$IMGALIGN_T/m")
        == " (environment variables such as $HOME are not expanded: give the full path)"
    )


def test_a_transformer_overlay_whose_config_names_no_class_loads_as_the_bases_class(tmp_path):
    """config.json without ``_class_name``: loaded with the base denoiser's class, in the given dtype."""
    from types import SimpleNamespace

    import torch

    from imgalign.pipelines import apply_overlay

    class Denoiser:
        @classmethod
        def from_pretrained(cls, folder: str, dtype: torch.dtype) -> tuple:
            return (cls.__name__, folder, dtype)

    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "config.json").write_text("{}")
    pipe = SimpleNamespace(transformer=Denoiser())
    apply_overlay(pipe, tmp_path, torch.bfloat16)
    assert pipe.transformer == ("Denoiser", str(tmp_path / "transformer"), torch.bfloat16)


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ({"num_layers": "two"}, r"TypeError: 'str' object cannot be interpreted as an integer"),
        ({"attention_head_dim": 7}, r"ValueError: embed_dim must be divisible by 2"),
        (
            {"caption_projection_dim": 32},
            r"ValueError: Cannot load .*context_embedder.bias expected shape torch.Size\(\[32\]\), "
            r"but got torch.Size\(\[16\]\)\. If its model_index.json",
        ),
    ],
)
def test_a_hand_edited_transformer_config_is_refused_naming_the_pipeline_folder(
    sd3_dir, tmp_path, edit, said
):
    """A config.json that does not fit its weights, or holds a value of the wrong type, made diffusers fail with a
    TypeError traceback or a bare line naming no folder, from every command that loads a pipeline (train through
    the adapter, grid and eval through load_pipeline); each is one ValueError naming the folder and the edit."""
    import json
    import shutil

    from imgalign.adapters import load_adapter
    from imgalign.pipelines import load_pipeline

    folder = tmp_path / "edited"
    shutil.copytree(sd3_dir, folder)
    config = folder / "transformer" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **edit}))
    for load in (load_pipeline, load_adapter):
        with pytest.raises(ValueError, match=rf"cannot load the pipeline '{folder}': {said}") as e:
            load(str(folder))
        assert "\n" not in str(e.value) and "or a config.json in it was edited by hand" in str(e.value)


def test_naming_pipeline_keeps_a_long_library_error_to_two_lines_and_lets_other_errors_through():
    from imgalign.hub import naming_pipeline

    with pytest.raises(
        ValueError, match=r"'m': RuntimeError: Error\(s\) in x: size a \(and 2 more lines; -v"
    ):
        with naming_pipeline("m"):
            raise RuntimeError("Error(s) in x:\n\tsize a\n\tsize b\n\tsize c.")
    with pytest.raises(FileNotFoundError), naming_pipeline("m"):  # the CLI's OSError line already names it
        raise FileNotFoundError("no such file: m/model_index.json")


def test_a_float16_pipeline_on_the_cpu_gets_diffusers_warning_once_not_once_per_module(sd3_dir):
    """grid --dtype float16 on a CPU printed diffusers' "cannot run with `cpu` device" line four times (once per
    module that pipe.to moved); load_pipeline lets the first through. Other records of that logger pass."""
    import logging

    import torch

    from imgalign.pipelines import load_pipeline, once_per_call

    class Keep(logging.Handler):  # diffusers' loggers do not propagate to the root (caplog)
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    log, keep = logging.getLogger("diffusers.pipelines.pipeline_utils"), Keep()
    log.addHandler(keep)
    try:
        load_pipeline(str(sd3_dir), "cpu", torch.float16)
        assert sum("cannot run with `cpu` device" in m for m in keep.messages) == 1
        keep.messages.clear()
        with once_per_call(log.name, "same"):
            for msg in ("same a", "other", "same b", "other"):
                log.warning(msg)
        assert keep.messages == ["same a", "other", "other"]
    finally:
        log.removeHandler(keep)


def test_a_model_folder_that_is_no_pipeline_says_what_it_holds(sd3_dir):
    """--model given the embedded shapes-clip or shapes-vlm folder, or one part of a pipeline, was called only "not
    a diffusers pipeline folder"; the error now says it is a reward model, or a part to give as BASE+PART."""
    import imgalign.pipelines as P
    from imgalign.hub import embedded_path

    for name, said in (
        (
            "shapes-clip",
            "it holds an open_clip CLIP, a reward model (clip:model=...), not a text-to-image model",
        ),
        ("shapes-vlm", "it holds a transformers 'fast_vlm' model, such as a reward or judge model"),
    ):
        with pytest.raises(P.IncompleteModelError, match=re.escape(said)):
            P.check_pipeline_folder(embedded_path(name))
    part = sd3_dir / "transformer"
    with pytest.raises(
        P.IncompleteModelError,
        match=re.escape(f"(SD3Transformer2DModel): give the pipeline folder, or BASE+{part}"),
    ):
        P.check_pipeline_folder(part)
