"""What the launcher (``accelerate launch``, torchrun) tells this process through its environment, read before any
model or accelerate state exists (``train --print-config``, which rank prints, logs or sums up)."""

from __future__ import annotations

import os


def world_size(text: str | None) -> int:
    """The process count in a ``WORLD_SIZE`` value (1 when unset or empty); a value that is not a whole number >= 1
    is refused naming WORLD_SIZE (int()'s message named neither it nor what sets it)."""
    text = text or "1"
    if not text.isdecimal() or int(text) < 1:
        raise ValueError(
            f"WORLD_SIZE={text!r} is not a process count (a whole number >= 1): the launcher (accelerate launch, "
            "torchrun) sets it; unset it to train in one process"
        )
    return int(text)


def launched_processes() -> int:
    """The process count the launcher started (``WORLD_SIZE``, set by ``accelerate launch`` and torchrun); 1 for a
    plain ``imgalign train``. A bad value is refused here too, so ``train --print-config`` (which lays out the batch
    with it) refuses what the run would (it took such a value for 1 and showed the config as fine)."""
    return world_size(os.environ.get("WORLD_SIZE"))


def launched_rank() -> int:
    """This process's global rank (``RANK``; 0 for a plain ``imgalign train``, and 0 without a launch of several
    processes, as accelerate has it): only rank 0 prints and logs INFO. A value that is not a whole number >= 0 is
    refused naming RANK (it was int()'s message alone, or a negative rank taken for the main process)."""
    text = os.environ.get("RANK") or "0"
    if not text.isdecimal():
        raise ValueError(
            f"RANK={text!r} is not a process rank (a whole number >= 0): the launcher (accelerate launch, torchrun) "
            "sets it for each process; unset it to train in one process"
        )
    # a RANK left in the shell with no launch of several processes: accelerate runs this process alone, as the
    # main one (process_index 0); taken for rank 1, it printed no config or run summary without a word why
    return int(text) if launched_processes() > 1 else 0
