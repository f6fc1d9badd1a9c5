"""`imgalign score` stopped (Ctrl-C, SIGTERM, SIGHUP) before any image was fully scored said so, and left its
hidden `.OUT.partial.jsonl` behind anyway (a header line, kept by nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign import shapes as W
from imgalign.cli import Interrupted, main
from imgalign.eval.suite import write_prompt_folder


def test_an_interrupt_before_the_first_batch_leaves_no_partial_file(tmp_path: Path, monkeypatch) -> None:
    import imgalign.commands.score as S

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    d = tmp_path / "gen"
    write_prompt_folder(
        d, 0, W.single_object("circle").to_metadata(), [W.render(W.single_object("circle"), 0)[0]]
    )
    out = tmp_path / "scores.jsonl"
    monkeypatch.setattr(S, "_score_group", stopped)
    with pytest.raises(Interrupted, match=r"interrupted before any image was fully scored$"):
        main(["score", str(d), "--reward", "geneval", "--no-progress", "--out", str(out)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen"]
