"""Bad input, round 34g: `world pretrain --component all --no-progress` with its workers' stderr on /dev/full."""

from imgalign.commands import world


def test_a_worker_without_a_bar_silences_the_libraries_bars(monkeypatch):
    """A worker process starts with diffusers' and transformers' bars on, so `--no-progress` still printed
    "Writing model shards" from the VLM's and the t2i model's exports; with `2>/dev/full` that write failed both
    exports as "cannot write OUT/shapes-vlm (No space left on device): is the disk full". The bars are off in a
    worker that shows none, on in the one that shows its bar, and on again after."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    seen = []

    def record(module, cfg, out, progress):
        seen.append(
            (diffusers_logging.is_progress_bar_enabled(), transformers_logging.is_progress_bar_enabled())
        )
        return {}

    monkeypatch.setattr(world, "_pretrain_one", record)
    diffusers_logging.enable_progress_bar()
    transformers_logging.enable_progress_bar()
    world._pretrain_in_worker("m", None, "out", False)
    world._pretrain_in_worker("m", None, "out", True)
    assert seen == [(False, False), (True, True)]
    assert diffusers_logging.is_progress_bar_enabled() and transformers_logging.is_progress_bar_enabled()


def test_a_worker_process_drops_what_its_stderr_refuses(monkeypatch):
    """`world pretrain --component all 2>/dev/full`: the worker showing the progress bar failed its component with
    "t2i: FAILED: OSError: [Errno 28] No space left on device" (its bar's write to stderr), naming no file; the
    command with one component, in the main process, drops such writes and finishes."""
    import errno
    import multiprocessing
    import sys

    class Full:
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            raise OSError(errno.ENOSPC, "No space left on device")

    def bar(module, cfg, out, progress):
        sys.stderr.write("\rt2i:  50%|#####     |")
        sys.stderr.flush()
        return {"done": 1.0}

    monkeypatch.setattr(sys, "stderr", Full())
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())  # as in a spawned worker
    monkeypatch.setattr(world, "_pretrain_one", bar)
    assert world._pretrain_in_worker("m", None, "out", True) == {"done": 1.0}
