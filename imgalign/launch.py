"""What the launcher (``accelerate launch``, torchrun) tells this process through its environment, read before any
model or accelerate state exists (``train --print-config``, which rank prints, logs or sums up)."""

from __future__ import annotations

import functools
import logging
import os

log = logging.getLogger(__name__)


def launched_processes() -> int:
    """The process count the launcher started (``WORLD_SIZE``, set by ``accelerate launch`` and torchrun); 1 for a
    plain ``imgalign train`` or a value that is not a positive integer (the trainer names a bad one)."""
    text = os.environ.get("WORLD_SIZE") or "1"
    return int(text) if text.isdecimal() and int(text) > 0 else 1


def launched_rank() -> int:
    """This process's global rank (``RANK``; 0 for a plain ``imgalign train``): only rank 0 prints and logs INFO. A
    value that is not a whole number >= 0 is refused naming RANK (it was int()'s message alone, or a negative rank
    taken for the main process)."""
    text = os.environ.get("RANK") or "0"
    if not text.isdecimal():
        raise ValueError(
            f"RANK={text!r} is not a process rank (a whole number >= 0): the launcher (accelerate launch, torchrun) "
            "sets it for each process; unset it to train in one process"
        )
    if int(text) > 0 and (os.environ.get("WORLD_SIZE") or "1") == "1":
        _warn_rank_without_launch(text)
    return int(text)


@functools.cache
def _warn_rank_without_launch(rank: str) -> None:
    """Once per process: RANK > 0 without a launch of several processes (a RANK left in the shell). accelerate
    trains such a process alone, as the main one, while imgalign took it for one of a launch's others and printed
    nothing: `imgalign train --print-config` showed no config, and a run no summary, without a word why."""
    log.warning(
        "RANK=%s is set, but WORLD_SIZE is not (or is 1): imgalign takes this process for process %s of a launch "
        "and prints no config or run summary, though it runs alone; unset RANK (left from another launch?) or "
        "start the processes with accelerate launch or torchrun",
        rank,
        rank,
    )
