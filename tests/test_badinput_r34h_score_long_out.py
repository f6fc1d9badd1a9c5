"""Bad-input round 34h: an --out name the file system takes, but whose hidden partial file's name it does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imgalign import shapes as W
from imgalign.cli import main

SPEC = W.single_object("circle")


def test_score_writes_an_out_of_251_bytes_and_removes_its_partial_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 251-byte --out name is legal (255 is the limit), but ``.<name>.partial.jsonl`` is 266 bytes: the run was
    refused, once the rewards had loaded, with "path '.eee...artial.jsonl' is too long", a file the user never
    named. The partial file takes a shorter hidden name; the scores are written and it is gone afterwards."""
    (tmp_path / "imgs").mkdir()
    img = tmp_path / "imgs" / "a.png"
    W.render(SPEC, 0)[0].save(img)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"file": str(img), **SPEC.to_metadata()}) + "\n")
    out = tmp_path / "res" / ("e" * 245 + ".jsonl")
    argv = ["score", str(img), "--prompts", str(prompts), "--reward", "geneval", "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 0, capsys.readouterr()
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["scores"] == {"geneval": 1.0}
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


def test_a_long_outs_partial_name_is_hidden_beside_it_and_its_own() -> None:
    from imgalign.commands.score import partial_path

    a, b = Path("runs") / ("a" * 250 + ".csv"), Path("runs") / ("b" * 250 + ".csv")
    pa, pb = partial_path(a), partial_path(b)
    assert pa.parent == a.parent and pa.name.startswith(".") and pa.name.endswith(".partial.jsonl")
    assert len(pa.name.encode()) <= 255 and pa != pb
    assert partial_path(Path("runs") / "s.csv") == Path("runs") / ".s.csv.partial.jsonl"
