"""Bad input, round 34g: a `world pretrain --component all` worker process killed mid-run (kill -9, the
out-of-memory killer)."""

import concurrent.futures
from concurrent.futures.process import BrokenProcessPool

from imgalign.cli import main


class _KilledPool:
    """A ProcessPoolExecutor whose worker was killed: every future fails as Python's pool fails them."""

    def __init__(self, max_workers: int, mp_context: object = None) -> None:
        pass

    def submit(self, fn, *a):
        f: concurrent.futures.Future = concurrent.futures.Future()
        f.set_exception(
            BrokenProcessPool(
                "A process in the process pool was terminated abruptly while the future was running or pending."
            )
        )
        return f

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def test_a_killed_worker_is_named_as_such_and_no_component_is_said_to_have_finished(
    tmp_path, monkeypatch, capsys
):
    """`kill -9` of one worker: the line said "pretraining failed for t2i, clip, vlm (first error: A process in the
    process pool was terminated abruptly ...); the other components finished": none had, and nothing said a
    worker had been killed or why that may be."""
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _KilledPool)
    out = tmp_path / "pre"
    assert main(["world", "pretrain", "--component", "all", "--jobs", "2", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert (
        "t2i: FAILED: a worker process was killed (by a signal: kill -9, or the system's out-of-memory"
        in (captured.out)
    )
    assert "the other components finished" not in captured.err
    assert captured.err.startswith(
        "imgalign world pretrain: error: pretraining failed for t2i, clip, vlm (first error: a worker process was "
        "killed (by a signal: kill -9, or the system's out-of-memory killer, see dmesg), which stops every "
        "component not finished). Fix the cause and run the same command again: every component resumes from"
    ), captured.err
