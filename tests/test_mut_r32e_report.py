"""Round 32e mutation survivors of imgalign/commands/report.py: tests that pin the behaviour they changed."""

from __future__ import annotations

from imgalign.cli import main


def test_a_run_spelt_the_same_twice_in_a_group_is_named_once(tmp_path, monkeypatch, capsys):
    """``--compare a=run,run``: the run is named, without the list of spellings that only two spellings of one
    folder (run and /abs/run) get."""
    import imgalign.eval.reports as reports

    calls = []
    monkeypatch.setattr(reports, "compare_runs", lambda *a, **kw: calls.append(a))
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--compare", "a=run,run", "--keys", "k", "--out", "o"]) == 2
    err = capsys.readouterr().err
    assert "--compare 'a=run,run' names run 'run' twice; give each run of a group once" in err
    assert calls == []
