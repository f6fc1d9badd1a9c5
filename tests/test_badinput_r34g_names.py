"""Bad input, round 34g: a write cut short by a file-size limit (``ulimit -f``) names the file it was writing."""

import errno
import pathlib
import re

import pytest

from imgalign.cli import main


def _nameless_efbig(*a, **k):
    """A write cut short as ``ulimit -f`` cuts it: Python's OSError names no file (it is raised by the write or the
    close, not the open)."""
    raise OSError(errno.EFBIG, "File too large")


def test_a_text_file_cut_short_names_itself_not_its_hidden_temporary(tmp_path, monkeypatch):
    """`imgalign train --output-dir RUN` under `ulimit -f 2` said "File too large while writing an output file under
    'RUN'": config.yaml was not named. The error names the file now, and no temporary is left."""
    from imgalign.files import atomic_write_text

    monkeypatch.setattr(pathlib.Path, "write_text", _nameless_efbig)
    with pytest.raises(OSError) as e:
        atomic_write_text(tmp_path / "config.yaml", "model: {}\n")
    assert e.value.errno == errno.EFBIG
    assert e.value.filename == str(tmp_path / "config.yaml")
    assert list(tmp_path.iterdir()) == []


def test_a_copy_that_names_its_hidden_temporary_names_the_file_instead(tmp_path):
    """shutil's copy names the source and the destination (the hidden temporary): the line named the latter."""
    from imgalign.files import replacing

    target = tmp_path / "0000.png"
    with pytest.raises(OSError) as e, replacing(target) as tmp:
        raise OSError(errno.EFBIG, "File too large", "src.png", None, str(tmp))
    assert (e.value.filename, e.value.filename2) == ("src.png", str(target))
    assert list(tmp_path.iterdir()) == []


def test_a_report_plot_cut_short_names_the_png(tmp_path, monkeypatch, capsys):
    """`imgalign report RUN --out REP` under `ulimit -f 10`: PIL's PNG writer failed with a nameless "[Errno 27]
    File too large", and the line said only "an output file under 'REP'"."""
    import PIL.Image
    from conftest import metrics_run

    run = tmp_path / "run"
    run.mkdir()
    metrics_run(run, [{"step": 1, "reward/r/mean": 0.1}, {"step": 2, "reward/r/mean": 0.2}])
    monkeypatch.setattr(PIL.Image.Image, "save", _nameless_efbig)
    out = tmp_path / "rep"
    assert main(["report", str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert re.search(f"File too large while writing '{re.escape(str(out))}/[a-z_]+[.]png':", err), err
    assert "an output file" not in err
    assert [p.name for p in out.iterdir()] == []
