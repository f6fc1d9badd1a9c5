"""Behaviour of the code added at stop 54 that no test checked (mutation round 17b): the x-counter drop check of
`report --compare`, the curves path of `trainers.plots`, the score --out guard and by-name prompt rows, the image
size of a class folder, the artifact fit on folders, the fid stats-size check, the length-warning marks and
`build-shapes-artifact --out ""`."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from PIL import Image

from imgalign.eval.reports import counter_drop

torch.set_num_threads(1)


def _save(path: Path, size: tuple[int, int], colour: tuple[int, int, int] = (200, 30, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)
    return path


def test_a_counter_drop_is_found_across_a_nan_and_a_bool_is_no_value() -> None:
    """A NaN between two values is passed over (the drop from 5 to 1 around it is found, not compared with NaN),
    and a bool is not a count: True after 2.0 is no drop."""
    nan = float("nan")
    assert counter_drop([{"step": 1, "c": 5.0}, {"step": 2, "c": nan}, {"step": 3, "c": 1.0}], "c") == (
        1,
        5.0,
        3,
        1.0,
    )
    assert counter_drop([{"step": 1, "c": 2.0}, {"step": 2, "c": True}, {"step": 3, "c": 2}], "c") is None


def test_an_empty_plots_out_is_the_default_path(tmp_path: Path) -> None:
    """`--out ""` is no --out: RUN/curves.png (or beside a metrics.jsonl given as the run), not ./curves.png."""
    from imgalign.trainers.plots import plot_target

    run = tmp_path / "run"
    run.mkdir()
    assert plot_target(run, "") == run / "curves.png"
    assert plot_target(run / "metrics.jsonl", None) == run / "curves.png"


@pytest.mark.parametrize(
    ("name", "first", "ours"),
    [
        ("S.CSV", "file,prompt,geneval,error\n", True),  # the suffix in capitals is CSV too
        ("s.csv", "file,caption\n", False),  # a CSV of other columns
        ("p.jsonl", '{"file": "a.png", "prompt": "a red circle"}\n', False),  # a --prompts file
        (
            "s.jsonl",
            '\n{"file": "a.png", "prompt": "p", "scores": {}, "error": null}\n',
            True,
        ),  # blank line first
        ("w.jsonl", "\n \n", True),  # blank lines only (echo > s.jsonl): empty, as an empty file is
    ],
)
def test_check_replaceable_takes_score_outputs_only(
    tmp_path: Path, name: str, first: str, ours: bool
) -> None:
    """An existing --out is replaced only when its first non-blank line is a score row (with "file" and "scores")
    or, for a .csv in any letter case, the score CSV header."""
    from imgalign.cli import CLIError
    from imgalign.commands.score import check_replaceable

    out = tmp_path / name
    out.write_text(first)
    if ours:
        check_replaceable(out)
    else:
        with pytest.raises(CLIError, match="exists and is not an `imgalign score` output"):
            check_replaceable(out)


def test_check_replaceable_leaves_an_unreadable_out_to_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An --out that cannot be opened is not refused here (check_output_file names it)."""
    from imgalign.commands.score import check_replaceable

    out = tmp_path / "p.jsonl"
    out.write_text('{"file": "a.png", "prompt": "p"}\n')

    def refuse(self: Path, *a: object, **k: object) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", refuse)
    check_replaceable(out)


def test_a_row_names_another_file_as_given_or_beside_the_prompt_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row's file is looked for as given (from the working folder) and relative to the prompt file's folder; it
    is another image's row when that image is scored in the same run; a file that is gone (or was never there) is
    no other file, so the row may still match by name."""
    from imgalign.commands.score import _row_name
    from imgalign.commands.score import _row_of_another_image as another

    a, b = _save(tmp_path / "a" / "x.png", (4, 4)), _save(tmp_path / "b" / "x.png", (4, 4))
    monkeypatch.chdir(tmp_path)
    scored = frozenset({a.resolve(), b.resolve()})
    assert another("a/x.png", b, None, scored)
    assert not another("a/x.png", b, None, frozenset({b.resolve()}))  # a/x.png not scored: b takes its row
    assert not another("a/x.png", a, None, scored)
    assert another("x.png", b, tmp_path / "a", scored)
    assert not another("gone/x.png", b, None, scored)
    # the path to write for an image outside the prompt file's folder is the path as given
    assert _row_name(b, tmp_path / "a") == str(b) and _row_name(Path("b/x.png"), None) == "b/x.png"
    assert _row_name(tmp_path / "a" / "x.png", tmp_path) == str(Path("a/x.png"))
    # the image scored is gone: its error row comes when it is read
    assert not another("a/x.png", tmp_path / "c" / "x.png", None, scored)


def test_folder_image_size_is_the_size_most_images_have(tmp_path: Path) -> None:
    """The size of most images (not the first file's, not 1 per size), from their headers; None with no image."""
    from imgalign.rewards.io import encode_image_folder, folder_image_size

    _save(tmp_path / "d" / "a.png", (16, 12))
    _save(tmp_path / "d" / "b.png", (8, 6))
    _save(tmp_path / "d" / "c.png", (8, 6))
    assert folder_image_size(tmp_path / "d") == (8, 6)
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "bad.png").write_bytes(b"not a png")
    assert folder_image_size(tmp_path / "e") is None
    # a (width, height) size resizes every image to it, as a side does to a square
    feats = encode_image_folder(tmp_path / "d", lambda x: x, (10, 4))
    assert tuple(feats.shape) == (3, 3, 4, 10)
    assert tuple(encode_image_folder(tmp_path / "d", lambda x: x, 5).shape) == (3, 3, 5, 5)
    # without a size: the size most images of the folder have, not of each batch (here of one image)
    assert tuple(encode_image_folder(tmp_path / "d", lambda x: x, batch_size=1).shape) == (3, 3, 6, 8)


def test_fit_artifact_on_folders_reads_the_artifacts_at_the_clean_size_as_the_negatives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The artifact images are resized to the clean images' size, the clean ones are the positives, and a folder of
    too few images is named by its flag."""
    import imgalign.rewards.artifact as A
    import imgalign.rewards.features as Fe

    for i in range(3):
        _save(tmp_path / "clean" / f"{i}.png", (8, 6), (200, 30, 30))
        _save(tmp_path / "art" / f"{i}.png", (12, 12), (30, 30, 200))
    seen: list[tuple[int, ...]] = []

    def encode(x: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(x.shape[-2:]))
        return x.mean(dim=(2, 3))  # [N, 3]: the mean colour

    monkeypatch.setattr(Fe, "build_features", lambda name, device="cpu": encode)
    got: dict[str, torch.Tensor] = {}

    def fit(pos: torch.Tensor, neg: torch.Tensor, **k: object) -> SimpleNamespace:
        got.update(pos=pos, neg=neg)
        return SimpleNamespace(head=None, metrics={"val_acc": 1.0})

    monkeypatch.setattr(A, "fit_head", fit)
    monkeypatch.setattr(A, "save_head", lambda *a, **k: None)
    assert A.fit_artifact(tmp_path / "clean", tmp_path / "art", "stats", tmp_path / "h") == {"val_acc": 1.0}
    assert set(seen) == {(6, 8)}
    assert (
        got["pos"][:, 0].min() > 0.5 and got["neg"][:, 2].min() > 0.5
    )  # clean (red) positive, artifact negative
    for f in list((tmp_path / "art").iterdir())[1:]:
        f.unlink()
    with pytest.raises(ValueError, match=r"^--artifact '.*art' holds 1 image\(s\)"):
        A.fit_artifact(str(tmp_path / "clean"), str(tmp_path / "art"), "stats", tmp_path / "h")


def test_fid_stats_of_more_dimensions_than_the_encoder_are_refused_when_built(tmp_path: Path) -> None:
    """Stats recorded with the encoder given but of another size are refused when the reward is built, also when
    they hold more dimensions than the encoder gives."""
    from imgalign.rewards.features import STATS_DIM
    from imgalign.rewards.fid import FIDReward, save_stats

    stats = tmp_path / "s.safetensors"
    n = STATS_DIM + 2
    save_stats(stats, torch.zeros(n), torch.eye(n), 10, "stats")
    with pytest.raises(ValueError, match=rf"holds {n}-d features; 'stats' gives {STATS_DIM}-d ones") as e:
        FIDReward(features="stats", ref=str(stats), set_size=40)
    assert str(e.value).endswith("recompute them with `imgalign rewards fid-stats --features stats`")


def test_length_warning_marks_of_a_tokenizer_shared_by_two_slots_are_put_back() -> None:
    """A pipeline whose tokenizer and tokenizer_2 are one object: the mark from before the block is kept (the second
    slot does not record the first slot's fresh mark), so an unmarked tokenizer is unmarked again after it."""
    from imgalign.pipelines import LENGTH_WARNING, length_warning_said, restore_length_warning

    tok = SimpleNamespace(deprecation_warnings={})
    pipe = SimpleNamespace(tokenizer=tok, tokenizer_2=tok)
    marks = length_warning_said(pipe)
    assert tok.deprecation_warnings == {LENGTH_WARNING: True}
    restore_length_warning(marks)
    assert tok.deprecation_warnings == {}


def test_build_shapes_artifact_with_an_empty_out_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """`--out "$OUT"` with OUT unset was read as no --out: the shipped model was retrained over. Refused, before
    anything is built (the build is stubbed: this test writes nothing)."""
    import imgalign.rewards.artifact as A
    from imgalign.cli import main

    def build(*a: object, **k: object) -> dict:
        raise AssertionError("built")

    monkeypatch.setattr(A, "build_shapes_artifact", build)
    monkeypatch.chdir(tmp_path)
    assert main(["rewards", "build-shapes-artifact", "--out", "", "--n", "2"]) == 2
    assert "--out is empty (an unset shell variable?)" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_the_logged_norm_ratio_weighs_rows_by_weights_of_any_dtype() -> None:
    """bf16 row weights (0.1 each, summing to 1.0009765625) are summed in float32: the weighted mean of a ratio of
    1 everywhere is 1, not 1.001 from a bf16 sum rounded to 1.0."""
    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import add_penalty

    v = torch.randn(10, 8, generator=torch.Generator().manual_seed(0))
    metrics: dict[str, float] = {}
    w = torch.full((10,), 0.1, dtype=torch.bfloat16)
    add_penalty(ObjectiveConfig(), torch.zeros(()), v, v.clone(), w, metrics)
    assert metrics["policy/vnorm_ratio"] == pytest.approx(1.0, abs=1e-6)


def test_the_bucket_norm_ratios_leave_out_rows_of_weight_0() -> None:
    """A row of weight 0 (not trained) is left out of the per-bucket ratios too: its bucket is not logged."""
    from imgalign.trainers.config import ObjectiveConfig
    from imgalign.trainers.objectives import add_penalty

    v, v_ref = torch.tensor([[3.0, 4.0], [1.0, 0.0]]), torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    metrics: dict[str, float] = {}
    add_penalty(
        ObjectiveConfig(), torch.zeros(()), v, v_ref, torch.tensor([1.0, 0.0]), metrics, ["early", "late"]
    )
    assert metrics["vnorm/norm_ratio/early"] == 5.0 and metrics["vnorm/norm_ratio/all"] == 5.0
    assert "vnorm/norm_ratio/late" not in metrics
