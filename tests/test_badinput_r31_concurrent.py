"""Bad-input round 31: two commands writing the same output file at once (`imgalign score --out`, `imgalign eval
--out DIR` run twice by mistake, or by two jobs of one script)."""

from __future__ import annotations

from pathlib import Path

from imgalign.files import NAME_MAX, atomic_write_text, replacing


def test_a_write_that_finishes_while_another_is_writing_does_not_publish_the_other_half_written(
    tmp_path: Path,
) -> None:
    """Both writers used ``.NAME.tmp``: the second truncated the file the first was writing, moved it into place,
    and the first went on writing into the published file (a reader saw it empty or mixed), then failed with
    FileNotFoundError. Each write now has a temporary file of its own: the published file is always one writer's
    whole content, and the last to finish wins."""
    path = tmp_path / "scores.jsonl"
    with replacing(path) as tmp, open(tmp, "w") as fh:
        fh.write('{"w": "A", "half": 1}\n')
        fh.flush()
        atomic_write_text(path, '{"w": "B"}\n')  # the other command, start to end
        assert path.read_text() == '{"w": "B"}\n'
        fh.write('{"w": "A", "half": 2}\n')
        fh.flush()
        assert path.read_text() == '{"w": "B"}\n'  # not the file A is still writing
    assert path.read_text() == '{"w": "A", "half": 1}\n{"w": "A", "half": 2}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["scores.jsonl"]


def test_two_writes_at_once_of_a_name_near_the_limit_get_different_temporary_files(tmp_path: Path) -> None:
    """A name whose temporary name is hashed (over NAME_MAX bytes with '.tmp') still gets one per write."""
    path = tmp_path / ("a" * 250 + ".json")
    with replacing(path) as first, replacing(path) as second:
        assert first != second and first.parent == second.parent == tmp_path
        assert all(len(p.name.encode()) <= NAME_MAX and p.name.startswith(".") for p in (first, second))
        first.write_text("1")
        second.write_text("2")
    assert path.read_text() == "1" and [p.name for p in tmp_path.iterdir()] == [path.name]
