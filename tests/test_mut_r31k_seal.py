"""Mutation round 31k: eval/suite.verdict_seal covers each field of a results.jsonl row's verdict: one edited by hand
(a partial score, an error, a prompt, a tag: each read by the summary or the reports) is judged again on a rerun
into the same --out, not reused."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from imgalign.cli import main


@pytest.mark.parametrize(
    "field, value",
    [
        ("partial", 0.25),
        ("error", "edited"),
        ("prompt", "an edited prompt"),
        ("tag", "colors"),
        ("reason", "edited words"),
    ],
)
def test_a_row_with_one_field_edited_by_hand_is_judged_again(
    tmp_path: Path, two_prompts: Path, caplog: pytest.LogCaptureFixture, field: str, value: object
) -> None:
    out = tmp_path / "ev"
    argv = [
        "eval",
        "--ground-truth",
        "--images-per-prompt",
        "1",
        "--prompts",
        str(two_prompts),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert rows[0][field] != value
    original = rows[0][field]
    rows[0][field] = value
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level(logging.WARNING):
        assert main(argv) == 0
    assert f"the row of {rows[0]['file']} was changed since it was judged" in caplog.text
    again = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert again[0][field] == original and again[1] == rows[1]
