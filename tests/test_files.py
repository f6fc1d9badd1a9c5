"""imgalign.files: result files are written whole or not at all, and a failed write leaves no temporary file."""

import pytest
import torch

from imgalign.files import atomic_write_text, replacing, temporary_name


def test_a_finished_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "results.jsonl"
    atomic_write_text(path, "old\n")
    atomic_write_text(path, "new\n")
    assert path.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["results.jsonl"]
    assert temporary_name(path) == tmp_path / ".results.jsonl.tmp"


@pytest.mark.parametrize("error", [OSError(27, "File too large"), KeyboardInterrupt()])
def test_a_write_cut_short_keeps_the_old_file_and_removes_the_temporary(tmp_path, error):
    """A full disk, a file-size limit or Ctrl-C mid-write used to leave a `.NAME.tmp` as large as the result."""
    path = tmp_path / "stats.safetensors"
    path.write_text("old")
    with pytest.raises(type(error)):
        with replacing(path) as tmp:
            tmp.write_text("half")
            raise error
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["stats.safetensors"]
    with pytest.raises(KeyboardInterrupt):  # nothing was there before: nothing is there after
        with replacing(tmp_path / "new.pt") as tmp:
            torch.save({"x": torch.zeros(3)}, tmp)
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.safetensors"]


def test_the_commands_writers_leave_no_temporary_when_a_write_fails(tmp_path, monkeypatch):
    """FID statistics, a reward head and a pretraining checkpoint: a save that fails half-way removes its temporary
    file and keeps the earlier file."""
    import safetensors.torch

    from imgalign.pretrain.encoder_common import save_checkpoint
    from imgalign.rewards.fid import save_stats

    stats = tmp_path / "ref.safetensors"
    save_stats(stats, torch.zeros(2), torch.eye(2), 5, "shapes-clip")
    before = stats.read_bytes()

    def cut(tensors, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(b"half")
        raise OSError(27, "File too large")

    monkeypatch.setattr(safetensors.torch, "save_file", cut)
    with pytest.raises(OSError):
        save_stats(stats, torch.ones(2), torch.eye(2), 5, "shapes-clip")
    assert stats.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["ref.safetensors"]

    def cut_torch(obj, f, *args, **kwargs):
        open(f, "wb").write(b"half")
        raise RuntimeError("unexpected pos 64")

    monkeypatch.setattr(torch, "save", cut_torch)
    with pytest.raises(OSError, match="cannot write .*state.pt .*is the disk full"):
        save_checkpoint(tmp_path / "ck" / "state.pt", {"step": 1})
    assert list((tmp_path / "ck").iterdir()) == []


def test_an_error_before_anything_was_written_propagates_as_itself(tmp_path):
    """A writer that fails before it creates the temporary file (a tensor that cannot be serialized, a bad argument)
    raises its own error, not a FileNotFoundError about a temporary file that never existed."""
    path = tmp_path / "results.jsonl"
    with pytest.raises(ValueError, match="cannot serialize"):
        with replacing(path):
            raise ValueError("cannot serialize")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_published_files_get_the_mode_open_gives_not_safetensors_0600(tmp_path, umask):
    """safetensors 0.8 writes 0600 whatever the umask: checkpoints, exported models, reward heads and FID statistics
    were unreadable to other users of a shared machine. A file published by `replacing`, a checkpoint folder
    (`finalize`) and a pretraining export (`replace_dir`) get 0o666 less the umask, as a plain open() gives."""
    import os
    import stat

    from safetensors.torch import save_file

    from imgalign.pretrain.encoder_common import replace_dir
    from imgalign.trainers.checkpoint import finalize

    def mode(p):
        return stat.S_IMODE(os.stat(p).st_mode)

    old = os.umask(umask)
    try:
        with replacing(tmp_path / "head.safetensors") as tmp:
            save_file({"w": torch.zeros(2)}, str(tmp))
        for publish in (finalize, replace_dir):
            folder = tmp_path / f".tmp-{publish.__name__}"
            (folder / "transformer").mkdir(parents=True)
            save_file({"w": torch.zeros(2)}, str(folder / "transformer" / "model.safetensors"))
            (folder / "config.json").write_text("{}")
            publish(folder, tmp_path / publish.__name__)
    finally:
        os.umask(old)
    published = [tmp_path / "head.safetensors"]
    published += [tmp_path / n / "transformer" / "model.safetensors" for n in ("finalize", "replace_dir")]
    assert [mode(p) for p in published] == [0o666 & ~umask] * 3
    assert mode(tmp_path / "finalize" / "config.json") == 0o666 & ~umask
