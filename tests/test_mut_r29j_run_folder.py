"""train's preflight refuses every run-folder entry of the wrong kind, not only the ones round 33g's test names
(round 29j mutants survived: RUN_FILES cut to config.yaml and metrics.jsonl; 'not a folder' read as 'a regular
file', which let a named pipe at samples/ through)."""

from __future__ import annotations

import os

import pytest


def _refused(out, monkeypatch, capsys) -> str:
    import imgalign.trainers.trainer as trainer
    from imgalign.cli import main

    def never(*a, **k):
        raise AssertionError("the run started")

    monkeypatch.setattr(trainer, "run", never)
    assert main(["train", "--output-dir", str(out)]) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("name", ["eval.jsonl", "rollouts.jsonl"])
def test_a_folder_named_as_a_run_file_is_refused(name, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    (out / name).mkdir(parents=True)
    assert _refused(out, monkeypatch, capsys) == (
        f"imgalign train: error: --output-dir {str(out)!r} holds a folder named {name!r}, where a run writes its "
        f"{name} file: move that folder away (or give another --output-dir)\n"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_where_a_run_writes_a_folder_is_refused(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    out.mkdir()
    os.mkfifo(out / "samples")
    assert "holds a file named 'samples', where a run writes its samples/ folder" in _refused(
        out, monkeypatch, capsys
    )


@pytest.mark.parametrize("name", ["samples", "checkpoints"])
def test_a_broken_link_where_a_run_writes_a_folder_is_refused(name, tmp_path, monkeypatch, capsys):
    """A link to nothing at samples/ passed the preflight (it does not exist()) and the run failed at its first
    grid with "[Errno 17] File exists: 'OUT/samples'" (round 29j, found while checking mutant T3)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / name).symlink_to(tmp_path / "gone")
    assert _refused(out, monkeypatch, capsys) == (
        f"imgalign train: error: --output-dir {str(out)!r} holds a broken link named {name!r}, where a run writes "
        f"its {name}/ folder: move that broken link away (or give another --output-dir)\n"
    )
