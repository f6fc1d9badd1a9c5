"""Bad-input round 35h: an `imgalign eval --out` folder whose results.jsonl was edited by hand before a rerun into
it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from imgalign.cli import main


def _judged_once(tmp_path: Path, two_prompts: Path) -> tuple[Path, list[str], list[dict]]:
    """An eval of the two prompts' ground-truth renders into tmp_path/ev: (--out, its argv, results.jsonl's rows)."""
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
    return out, argv, [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]


def test_a_verdict_edited_by_hand_is_judged_again_not_reused(
    tmp_path: Path, two_prompts: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A rerun into the same --out reuses the verdict of every image whose bytes and prompt are unchanged. A row
    whose verdict was edited (a wrong answer marked correct) was reused as it stood: the rerun's summary.json gave
    the edited score, without a word. The row is now judged again, with a warning naming it."""
    out, argv, rows = _judged_once(tmp_path, two_prompts)
    judged = json.loads((out / "summary.json").read_text())["overall"]
    assert rows[0]["correct"] is True  # ground-truth renders: each one right
    rows[0].update(correct=False, partial=0.0)
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    assert main(argv) == 0
    assert json.loads((out / "summary.json").read_text())["overall"] == judged
    again = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert again[0]["correct"] is True and again[1] == rows[1]
    assert (
        f"{out / 'results.jsonl'}: the row of {rows[0]['file']} was changed since it was judged"
        in caplog.text
    )
    assert rows[1]["file"] not in caplog.text  # the untouched row is reused


def test_a_row_written_before_seals_existed_is_still_reused(tmp_path: Path, two_prompts: Path) -> None:
    """A results.jsonl of an earlier imgalign holds no seal: its verdicts are reused as before, not judged again."""
    from imgalign.eval import suite

    out, argv, rows = _judged_once(tmp_path, two_prompts)
    for r in rows:
        del r["seal"]
        r["reason"] = "an older judge's words"
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(argv) == 0
    kept = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in kept] == ["an older judge's words"] * 2
    assert suite.verdict_seal(kept[0]) != suite.verdict_seal({**kept[0], "correct": not kept[0]["correct"]})


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
    """(Round 31k) the seal covers each field of a row's verdict: one edited by hand (a partial score, an error, a
    prompt, a tag: each read by the summary or the reports) is judged again on a rerun, not reused."""
    out, argv, rows = _judged_once(tmp_path, two_prompts)
    assert rows[0][field] != value
    original = rows[0][field]
    rows[0][field] = value
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level(logging.WARNING):
        assert main(argv) == 0
    assert f"the row of {rows[0]['file']} was changed since it was judged" in caplog.text
    again = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert again[0][field] == original and again[1] == rows[1]
