"""Bad input, round 34g: `imgalign score` cut short by a file-size limit while it appends to its partial file."""

import errno
import json

import pytest


class _CutShort:
    """An open file whose write is cut short as ``ulimit -f`` cuts it: an OSError that names no file."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, text):
        raise OSError(errno.EFBIG, "File too large")


def test_the_partial_file_cut_short_is_named(tmp_path, monkeypatch):
    """`ulimit -f 20; imgalign score gt --reward geneval --out s.jsonl` said "File too large while writing an output
    file under 's.jsonl'": the file that grew past the limit is the hidden .s.jsonl.partial.jsonl."""
    import pathlib

    from imgalign.commands.score import _append_partial, partial_path

    partial = partial_path(tmp_path / "s.jsonl")
    monkeypatch.setattr(pathlib.Path, "open", lambda self, mode="r", **k: _CutShort())
    with pytest.raises(OSError) as e:
        _append_partial(partial, [{"row": {"file": "a.png"}}])
    assert e.value.filename == str(partial)
    assert str(e.value) == f"[Errno 27] File too large: {str(partial)!r}"
    monkeypatch.undo()
    _append_partial(partial, [{"row": {"file": "a.png"}}])
    assert json.loads(partial.read_text()) == {"row": {"file": "a.png"}}
