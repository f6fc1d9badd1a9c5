"""Bad-input round 20: `imgalign grid` with long and odd prompts."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from imgalign.cli import main

torch.set_num_threads(1)
LONG = "a red circle " * 10  # the tiny tokenizers spell it out: over 77 tokens


def test_grid_names_the_rows_whose_prompts_are_truncated_once(
    sd3_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, library_log: list[logging.LogRecord]
) -> None:
    """Long grid prompts were reported by transformers' "Token indices sequence length ... indexing errors" line
    and one diffusers notice (the rest dropped) showing the first truncated prompt's cut part, naming no row: for
    a prompt one token over, only '<|endoftext|>', while a far longer row lost nearly every word. The grid names
    the rows and the first one's token count, once per model, and the libraries' notices are quiet."""
    out = tmp_path / "g.png"
    argv = [
        "grid",
        "--model",
        f"a={sd3_dir}",
        "--prompt",
        "a red circle",
        "--prompt",
        LONG,
        "--prompt",
        LONG + "x",
    ]
    argv += ["--steps", "1", "--size", "16", "--cell", "16", "--out", str(out)]
    with caplog.at_level(logging.WARNING):
        assert main(argv) == 0
    assert out.is_file()
    assert [r.getMessage()[:40] for r in library_log if r.levelno >= logging.WARNING] == []
    said = [r.getMessage() for r in caplog.records if r.name == "imgalign.sampling"]
    assert said == [
        "a: the prompts of rows 2, 3 (row 2: 102 CLIP tokens) are longer than its text encoders take (CLIP 77 "
        "tokens): truncated when encoded, so the words past the limit do not steer its images"
    ]
    # quieted for the grid only
    from imgalign.pipelines import MessageFilter

    assert not any(
        isinstance(f, MessageFilter)
        for n in list(logging.root.manager.loggerDict)
        for f in getattr(logging.getLogger(n), "filters", [])
    )


def test_the_long_rows_warning_counts_rows_and_shows_at_most_ten() -> None:
    from imgalign.sampling import long_rows_warning

    prompts = [f"p{i}" for i in range(14)]
    over = {p: ("T5", 300 + i) for i, p in enumerate(prompts) if i != 1}
    assert long_rows_warning("m", prompts, over, "CLIP 77, T5 256") == (
        "m: the prompts of rows 1, 3, 4, 5, 6, 7, 8, 9, 10, 11 and 3 more (row 1: 300 T5 tokens) are longer than "
        "its text encoders take (CLIP 77, T5 256 tokens): truncated when encoded, so the words past the limit do "
        "not steer its images"
    )
    assert long_rows_warning("m", prompts, {"p1": ("CLIP", 80)}, "CLIP 77") == (
        "m: the prompt of row 2 (80 CLIP tokens) is longer than its text encoders take (CLIP 77 tokens): "
        "truncated when encoded, so the words past the limit do not steer its images"
    )


def test_eval_names_the_prompt_folders_whose_prompts_are_truncated_once(
    sd3_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, library_log: list[logging.LogRecord]
) -> None:
    """`imgalign eval --model` (generate_folder) had the grid's notices: transformers' "indexing errors" line and
    one diffusers notice showing a cut part, naming no prompt. It names the prompt folders, once."""
    from imgalign.sampling import generate_folder, generate_images

    metas = [
        {"tag": "single_object", "prompt": p} for p in ("a red circle", LONG, "a blue square", LONG + "y")
    ]

    def sampled() -> list[str]:
        """generate_folder into tmp_path/out, one image per prompt; what imgalign.sampling warned."""
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            generate_folder(
                str(sd3_dir),
                metas,
                tmp_path / "out",
                1,
                0,
                progress=False,
                sample=generate_images,
                steps=1,
                size=16,
            )
        return [r.getMessage() for r in caplog.records if r.name == "imgalign.sampling"]

    said = sampled()
    assert len(list((tmp_path / "out").glob("*/samples/0000.png"))) == 4
    assert [r.getMessage()[:40] for r in library_log if r.levelno >= logging.WARNING] == []
    assert said == [
        f"{sd3_dir}: the prompts of prompt folders 00001, 00003 (prompt folder 00001: 102 CLIP tokens) are longer than its text "
        "encoders take (CLIP 77 tokens): truncated when encoded, so the words past the limit do not steer its images"
    ]
    # resumed with folder 00003's image gone: only the folders still to sample are named
    (tmp_path / "out" / "00003" / "samples" / "0000.png").unlink()
    said = sampled()
    assert len(said) == 1 and said[0].startswith(f"{sd3_dir}: the prompt of prompt folder 00003 (")


def test_the_length_line_is_quiet_for_the_sampling_block_only(sd3_dir: Path) -> None:
    """long_prompts_said marked transformers' "indexing errors" line as said on every tokenizer of the pipeline for
    good: a caller's pipeline, used after it for other long prompts, never said it again. The marks are put back
    after the block (a tokenizer that had said it stays marked)."""
    from imgalign.pipelines import LENGTH_WARNING, load_pipeline
    from imgalign.sampling import long_prompts_said

    pipe = load_pipeline(str(sd3_dir))
    pipe.tokenizer.deprecation_warnings.pop(LENGTH_WARNING, None)
    pipe.tokenizer_2.deprecation_warnings[LENGTH_WARNING] = True
    marks = [pipe.tokenizer.deprecation_warnings, pipe.tokenizer_2.deprecation_warnings]
    with long_prompts_said(pipe, "m", [LONG], None):
        assert [m.get(LENGTH_WARNING) for m in marks] == [True, True]
    assert [m.get(LENGTH_WARNING) for m in marks] == [None, True]
