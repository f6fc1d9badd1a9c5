"""A full disk during `imgalign score` says the scored images are kept and how to go on (stop 66; round 33g's note:
it said only "then run the same command again", though the partial file keeps every fully scored image)."""

from __future__ import annotations

import errno

from imgalign.cli import main


def test_a_full_disk_in_score_says_the_scores_are_kept(monkeypatch, capsys):
    import imgalign.commands.score as score

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(score, "run_score", full)
    assert main(["score", "imgs", "--reward", "clip", "--out", "s.jsonl"]) == 2
    assert capsys.readouterr().err == (
        "imgalign score: error: No space left on device while writing an output file under 's.jsonl': free disk "
        "space (or raise the file-size limit, ulimit -f); the images fully scored so far are kept in a hidden "
        ".OUT.partial.jsonl beside --out: run the same command again to score the rest\n"
    )
