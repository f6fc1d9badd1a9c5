"""Round 19 (mutation round, stop 56): ``imgalign world pretrain``'s --out checks and its pool (imgalign/commands/
world.py)."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pytest

from imgalign.cli import main
from imgalign.commands import world


@pytest.mark.parametrize("name", ["t2i-work", "shapes-clip.train"])
def test_a_new_out_named_as_a_work_folder_is_taken(tmp_path: Path, monkeypatch, capsys, name: str) -> None:
    """Only a work folder (one holding its run's config.json) given as --out is refused; a new or empty folder that
    happens to have a work folder's name is a pretraining folder like any other."""
    monkeypatch.setattr(world, "_pretrain_one", lambda module, cfg, out, progress: {"out": Path(out).name})
    out = tmp_path / name
    assert main(["world", "pretrain", "--component", "vlm", "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"vlm: {{'out': {name!r}}}\n"


def test_a_components_own_set_hint_is_prefixed_and_gets_no_second_one(tmp_path: Path, capsys) -> None:
    """With --component all, a component's error that says how to --set the key has its hint prefixed with the
    component (--set t2i.heads=N), and no generic "(--set t2i.KEY=VALUE)" after it; one without a hint gets that."""
    base = ["world", "pretrain", "--component", "all", "--out", str(tmp_path / "pt"), "--set"]
    assert main([*base, "t2i.heads=0"]) == 2
    assert capsys.readouterr().err == (
        "imgalign world pretrain: error: t2i: heads must be at least 1 (got 0); set it with --set t2i.heads=N\n"
    )
    assert main([*base, "vlm.steps=abc"]) == 2
    assert capsys.readouterr().err.endswith(
        "vlm: steps: expected an integer, got 'abc' (--set vlm.KEY=VALUE)\n"
    )
    assert not (tmp_path / "pt").exists()


class _QueuePool:
    """A ProcessPoolExecutor stand-in whose jobs have finished at once; records its shutdowns."""

    shutdowns: list[dict] = []

    def __init__(self, max_workers: int, mp_context: object = None) -> None:
        pass

    def submit(self, fn, *a):
        f: concurrent.futures.Future = concurrent.futures.Future()
        f.set_result({})
        return f

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        self.shutdowns.append({"wait": wait, "cancel_futures": cancel_futures})


def test_an_error_while_reporting_the_pools_results_cancels_the_queued_components(monkeypatch) -> None:
    """An error other than Ctrl-C while the results are reported (stdout's reader gone) leaves the pool with its
    queued components cancelled: a plain shutdown would wait for each of them to train to the end."""
    monkeypatch.setattr(_QueuePool, "shutdowns", [])
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _QueuePool)

    def gone(*a, **kw):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(world, "print", gone, raising=False)
    with pytest.raises(BrokenPipeError):
        world.pretrain_in_pool({"t2i": ("m", None), "clip": ("m", None)}, Path("out"), 1)
    assert _QueuePool.shutdowns == [{"wait": True, "cancel_futures": True}]
