"""Bad input, round 35i: `imgalign score` at scale. A --prompts file of 50,000 rows whose 'file' names another folder
(the images moved since; rows match by file name) took ~0.12 s per image before the first score: each image was
looked up by name through every row, so 20,000 images took about 40 minutes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import noise_pngs

from imgalign.cli import main
from imgalign.commands import score


class _CountingRows(dict):
    """The prompt rows, counting each pass over all of them."""

    passes = 0

    def __iter__(self):
        _CountingRows.passes += 1
        return super().__iter__()

    def items(self):
        _CountingRows.passes += 1
        return super().items()

    def keys(self):
        _CountingRows.passes += 1
        return super().keys()

    def values(self):
        _CountingRows.passes += 1
        return super().values()


def test_matching_images_to_prompt_rows_by_name_reads_the_rows_a_fixed_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    images = noise_pngs(tmp_path / "imgs", 12)
    files = sorted(images.iterdir())
    # rows of the first 8 images under the folder they were made in (matched by name), a row of another name
    # differing in letter case only for the 9th (its hint), and no row for the last 3
    rows = [{"file": f"moved/{f.name}", "prompt": f"a photo of image {i}"} for i, f in enumerate(files[:8])]
    rows.append({"file": f"moved/{files[8].name.upper()}", "prompt": "a photo"})
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    real = score.load_prompt_map
    monkeypatch.setattr(score, "load_prompt_map", lambda p: _CountingRows(real(p)))
    _CountingRows.passes = 0
    out = tmp_path / "s.jsonl"
    code = main(
        ["score", str(images), "--reward", "clip", "--prompts", str(tmp_path / "p.jsonl"), "--no-progress"]
        + ["--out", str(out)]
    )
    assert code == 1  # (the 4 images without a row)
    assert _CountingRows.passes <= 4, f"{_CountingRows.passes} passes over the rows for {len(files)} images"
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["prompt"] for r in got[:8]] == [f"a photo of image {i}" for i in range(8)]
    assert all(r["error"] is None and "clip" in r["scores"] for r in got[:8])
    assert "differs in letter case" in got[8]["error"]
    assert all("no prompt for" in r["error"] for r in got[9:])
    capsys.readouterr()
