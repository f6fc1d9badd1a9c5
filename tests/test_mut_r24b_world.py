"""``imgalign world pretrain --component all``: a component that fails with any error, not only a ValueError (an
OSError of a full disk, a RuntimeError from torch), is reported and the other components still train, one after
the other (--jobs 1) or in the pool (round 24, second pass: mutants W18 and W21)."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest

from imgalign.cli import main
from imgalign.commands import world


class InlinePool:
    """A ProcessPoolExecutor stand-in that runs each job at submit time, in this process, keeping its error."""

    def __init__(self, max_workers: int, mp_context: Any = None) -> None:
        self.max_workers = max_workers

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass

    def submit(self, fn: Any, *args: Any) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        try:
            fut.set_result(fn(*args))
        except Exception as e:
            fut.set_exception(e)
        return fut


def _t2i_breaks(module: str, cfg: Any, out: str, progress: bool) -> dict[str, float]:
    if module.endswith(".t2i"):
        raise RuntimeError("CUDA out of memory (a stand-in)")
    return {"trained": 1.0}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_component_failing_with_an_error_other_than_valueerror_does_not_stop_the_others(
    tmp_path, monkeypatch, capsys, jobs: str
) -> None:
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", InlinePool)
    monkeypatch.setattr(world, "_pretrain_one", _t2i_breaks)
    args = ["world", "pretrain", "--component", "all", "--out", str(tmp_path), "--jobs", jobs]
    assert main(args) != 0
    out, err = capsys.readouterr()
    assert "t2i: FAILED: RuntimeError: CUDA out of memory (a stand-in)" in out
    assert "clip: {'trained': 1.0}" in out and "vlm: {'trained': 1.0}" in out
    assert "pretraining failed for t2i (first error: CUDA out of memory (a stand-in))" in err
