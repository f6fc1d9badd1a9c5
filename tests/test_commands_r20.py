"""Round 20 mutation tests for the shared command helpers and imgalign/commands/report.py (stop 57)."""

from __future__ import annotations

from imgalign.cli import main


def test_compare_refuses_one_run_named_relatively_and_absolutely_in_a_group(tmp_path, monkeypatch, capsys):
    """``--compare a=run,/abs/run`` names one run twice (its curve would count twice in the group's mean): the
    runs are compared as folders, not as typed, and both spellings are named (R12)."""
    import imgalign.eval.reports as reports

    calls = []
    monkeypatch.setattr(reports, "compare_runs", lambda *a, **kw: calls.append(a))
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path)
    group = f"a=run,{tmp_path / 'run'}"
    assert main(["report", "--compare", group, "--keys", "k", "--out", "o"]) == 2
    err = capsys.readouterr().err
    assert f"--compare {group!r} names run 'run' twice ('run' and {str(tmp_path / 'run')!r})" in err
    assert calls == []
