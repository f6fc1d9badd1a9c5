"""Mutation round 30k: `world pretrain --component all`'s line after failures (imgalign/commands/world.py)."""

import concurrent.futures
from concurrent.futures.process import BrokenProcessPool

from test_badinput_r34g_pool import _KilledPool
from test_mut_r24b_world import InlinePool, _t2i_breaks

from imgalign.cli import main
from imgalign.commands import world


def test_one_component_failing_says_the_others_finished(tmp_path, monkeypatch, capsys):
    """Only t2i failed: the line says that the CLIP and the VLM finished (it is left out only when none did)."""
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", InlinePool)
    monkeypatch.setattr(world, "_pretrain_one", _t2i_breaks)
    assert main(["world", "pretrain", "--component", "all", "--out", str(tmp_path), "--jobs", "2"]) == 2
    err = capsys.readouterr().err
    assert (
        "pretraining failed for t2i (first error: CUDA out of memory (a stand-in)); the other components finished. "
        "Fix the cause" in err
    ), err


def test_a_killed_worker_keeps_pythons_error_as_the_cause(tmp_path, monkeypatch):
    """The new line replaces Python's "terminated abruptly" one; that one stays the cause, for -v's traceback."""
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _KilledPool)
    failed = world.pretrain_in_pool({"t2i": ("m", None)}, tmp_path, 2, progress=False)
    assert str(failed["t2i"]).startswith("a worker process was killed (by a signal")
    cause = failed["t2i"].__cause__
    assert isinstance(cause, BrokenProcessPool) and "terminated abruptly" in str(cause)
