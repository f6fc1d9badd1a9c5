"""Mutation round 16b: behaviour of the code added in round 16's fixes that no test checked (ids in
/work/audit/s53/mE/mutations.tsv)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.parametrize("text", ["null", "[]", '"shapes"', "3"])
def test_an_eval_args_json_that_is_valid_json_but_no_record_is_damaged_not_a_traceback(
    tmp_path: Path, text: str
) -> None:
    """judge_name's update of the old record ran `.update`/`.get` on whatever the JSON held: `null` or a list gave an
    AttributeError traceback, even alone in the folder (which is taken over)."""
    from imgalign.commands.evaluate import claim_out_folder

    out = tmp_path / "out"
    out.mkdir()
    (out / "eval_args.json").write_text(text)
    claim_out_folder(out, {"suite": "shapes"})  # alone: taken over
    assert json.loads((out / "eval_args.json").read_text()) == {"suite": "shapes"}
    (out / "eval_args.json").write_text(text)
    (out / "results.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match="eval_args.json is damaged"):
        claim_out_folder(out, {"suite": "shapes"})


def test_a_long_name_is_measured_in_bytes_and_its_longest_part_named(tmp_path: Path, capsys) -> None:
    """C04: the limit is 255 bytes per name, so 150 'é' (300 bytes, 150 characters) is said to be 300 bytes; the
    longest part of the path is measured, not the whole path."""
    from imgalign.cli import main

    name = "é" * 150
    assert main(["eval", "--suite", "shapes", "--model", name, "--out", str(tmp_path / "ev")]) == 2
    assert "(a folder or file name of 300 bytes;" in capsys.readouterr().err
    deep = tmp_path / ("b" * 20) / ("c" * 270)
    assert main(["train", "--max-steps", "1", "--output-dir", str(deep)]) == 2
    assert "a folder or file name of 270 bytes" in capsys.readouterr().err


def test_generate_folder_names_its_prompt_folders_at_the_given_context_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S09: eval's --max-sequence-length reaches the long-prompt check (a T5 limit of 77 cuts what 256 keeps), and
    the prompts are named by their folders."""
    import contextlib

    from PIL import Image

    import imgalign.sampling as S

    seen: list[tuple] = []

    @contextlib.contextmanager
    def recording(pipe, label, prompts, max_sequence_length, noun="row", names=None):
        seen.append((label, list(prompts), max_sequence_length, noun, list(names or [])))
        yield

    def sample(pipe, prompts, seeds, **kw):
        return [Image.new("RGB", (8, 8)) for _ in prompts]

    monkeypatch.setattr(S, "long_prompts_said", recording)
    metas = [{"prompt": "a"}, {"prompt": "b"}]
    S.generate_folder(
        object(), metas, tmp_path / "o", 1, 0, progress=False, sample=sample, max_sequence_length=99
    )
    assert seen == [("the model", ["a", "b"], 99, "prompt folder", ["00000", "00001"])]


def test_a_local_clip_judge_is_recorded_by_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E02: --clip, like --detector, names a folder by its absolute path (relative and absolute: one evaluation);
    an open_clip ARCH:PRETRAINED is recorded as given."""
    import argparse

    from imgalign.commands.evaluate import eval_identity

    (tmp_path / "clipdir").mkdir()
    monkeypatch.chdir(tmp_path)
    given = dict(suite="geneval", detector="det-hub-id", clip="clipdir", images=str(tmp_path), model=None)
    ident = eval_identity(argparse.Namespace(**given))
    assert (ident["detector"], ident["clip"]) == ("det-hub-id", str(tmp_path / "clipdir"))
    absolute = eval_identity(argparse.Namespace(**{**given, "clip": str(tmp_path / "clipdir")}))
    assert absolute == ident
    assert (
        eval_identity(argparse.Namespace(**{**given, "clip": "ViT-B-32:openai"}))["clip"] == "ViT-B-32:openai"
    )


def test_a_clip_judge_named_with_an_unset_variable_is_no_such_folder(tmp_path: Path) -> None:
    """R05: a CLIP path holding a $VAR only a shell expands (a YAML config) is 'no such folder' with that hint, not
    'not a known open_clip ARCH:PRETRAINED pair'."""
    from geneval_real_tiny import build_tiny_detr

    from imgalign.eval.real import check_judge_specs

    detr = str(build_tiny_detr(tmp_path / "detr"))
    with pytest.raises(
        FileNotFoundError,
        match=r"CLIP .\$CLIPS/x.: no such folder \(environment variables .* are not expanded",
    ):
        check_judge_specs(detr, "$CLIPS/x")


def test_a_processor_without_the_step_flags_resizes_rescales_and_normalises() -> None:
    """F02, F04, F05: a processor object that has no do_resize / do_normalize / do_rescale attribute (not every
    processor class defines them) runs each step, as the transform did before the flags were read."""
    from types import SimpleNamespace

    import torch

    from imgalign.rewards.features import image_processor_transform

    proc = SimpleNamespace(
        size={"height": 4, "width": 6},
        do_center_crop=False,
        image_mean=[0.5, 0.25, 0.0],
        image_std=[0.5, 0.5, 2.0],
    )
    x = torch.full((1, 3, 8, 12), 0.75)
    got = image_processor_transform(proc, "x", "cpu", torch.float32)(x)
    assert got.shape == (1, 3, 4, 6)  # resized
    want = (
        torch.tensor([(0.75 - 0.5) / 0.5, (0.75 - 0.25) / 0.5, 0.75 / 2.0])
        .view(1, 3, 1, 1)
        .expand(1, 3, 4, 6)
    )
    torch.testing.assert_close(got, want)  # [0, 1] pixels (rescaled by 1/255), normalised


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_a_head_file_with_an_infinite_weight_is_damaged(tmp_path: Path, value: float) -> None:
    """H05: an inf weight, like a NaN one, gave every image a non-finite score; it is named as damaged, with the fit
    command of the head's task."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from imgalign.rewards.heads import FeatureHead, load_head, save_head

    good = tmp_path / "good.safetensors"
    save_head(good, FeatureHead(5, hidden=4), "stats", "artifact", {})
    tensors = load_file(str(good))
    with safe_open(str(good), framework="pt") as fh:
        meta = dict(fh.metadata())
    tensors["net.0.weight"][1, 2] = value
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    with pytest.raises(
        ValueError,
        match=r"damaged imgalign feature head \(NaN or inf weights\); fit it again with "
        r"`imgalign rewards fit-artifact`$",
    ):
        load_head(bad)


def test_grid_checks_long_prompts_at_the_given_context_length_per_model_label(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """G04: --max-sequence-length reaches the long-prompt check (a T5 limit of 3 cuts what 256 keeps), which names
    each model by its LABEL."""
    import contextlib

    from PIL import Image

    import imgalign.eval.gallery as gallery
    import imgalign.pipelines as P
    import imgalign.sampling as S
    from imgalign.cli import main

    seen: list[tuple] = []

    @contextlib.contextmanager
    def recording(pipe, label, prompts, max_sequence_length, noun="row", names=None):
        seen.append((label, list(prompts), max_sequence_length))
        yield

    monkeypatch.setattr(P, "load_pipeline", lambda spec, device, dtype: spec.label)
    monkeypatch.setattr(S, "long_prompts_said", recording)
    monkeypatch.setattr(
        S,
        "generate_images",
        lambda pipe, prompts, seeds, batch_size, **kw: [Image.new("RGB", (4, 4))] * len(seeds),
    )
    monkeypatch.setattr(gallery, "labelled_grid", lambda *a, **kw: Image.new("RGB", (4, 4)))
    argv = ["grid", "--model", "a=shapes", "--model", "b=shapes", "--prompt", "x", "--prompt", "y"]
    assert main(argv + ["--max-sequence-length", "3", "--out", str(tmp_path / "g.png")]) == 0
    assert seen == [("a", ["x", "y"], 3), ("b", ["x", "y"], 3)]


def test_a_prompt_ending_in_a_subdivision_flag_keeps_its_tag_characters(tmp_path: Path) -> None:
    """clean_prompt stripped every trailing Unicode Cf character, and the tag characters that make a black flag
    Scotland's (or England's, Wales') flag are Cf: 'a flag 🏴 + six tags' became 'a flag 🏴', another flag. They
    are kept; a zero-width space after the flag still goes."""
    from imgalign.prompts.io import clean_prompt, load_prompts

    scotland = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
    assert clean_prompt(f" a flag {scotland}\u200b ") == f"a flag {scotland}"
    txt = tmp_path / "p.txt"
    txt.write_text(f"a flag {scotland}\n", encoding="utf-8")
    assert [r.prompt for r in load_prompts(txt)] == [f"a flag {scotland}"]


def test_an_out_name_the_file_system_takes_is_written_even_where_its_temporary_name_would_not_be(
    tmp_path: Path,
) -> None:
    """An --out name of 251 to 255 bytes is a valid name, but the hidden '.NAME.tmp' written first is 5 bytes longer:
    fid-stats computed its statistics and then failed with 'a file name of 257 bytes', naming the hidden file. The
    temporary name is shortened there (a name the file system refuses still fails, as before)."""
    from imgalign.files import atomic_write_text, temporary_name

    path = tmp_path / ("a" * 240 + ".safetensors")  # 252 bytes
    assert len(temporary_name(path).name.encode()) <= 255 and temporary_name(path).name.startswith(".")
    assert temporary_name(path).parent == tmp_path
    assert temporary_name(path) != temporary_name(tmp_path / ("b" * 240 + ".safetensors"))
    atomic_write_text(path, "x")
    assert path.read_text() == "x" and [p.name for p in tmp_path.iterdir()] == [path.name]
    assert temporary_name(tmp_path / "r.json") == tmp_path / ".r.json.tmp"  # a short name keeps its form
    with pytest.raises(OSError, match="too long"):
        atomic_write_text(tmp_path / ("a" * 256), "x")
