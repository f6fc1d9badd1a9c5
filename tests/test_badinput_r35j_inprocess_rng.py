"""Round 35 (helper j): an in-process ``imgalign.cli.main`` call leaves the caller's Python ``random`` and NumPy
global random states as they were. ``train --resume`` sets both from the checkpoint it resumes
(``checkpoint.set_rng_state``), so a notebook's ``np.random.seed(0)`` followed by a resumed run drew the
checkpoint's numbers after it; only torch's state was given back."""

from __future__ import annotations

import argparse
import random

import numpy as np
import pytest

from imgalign import cli
from imgalign.trainers import checkpoint as C


@pytest.mark.parametrize("fail", [False, True])
def test_the_callers_python_and_numpy_random_states_are_back_after_a_resume(monkeypatch, fail) -> None:
    py_before, np_before = random.getstate(), np.random.get_state()
    random.seed(99)
    np.random.seed(99)
    saved = C.rng_state()  # a checkpoint's states, saved by another run

    def resuming_command(args: argparse.Namespace) -> int:
        C.set_rng_state(*saved)  # as the trainer's _load does on --resume
        random.random()
        np.random.rand()
        if fail:
            raise RuntimeError("a plug-in crashed")
        return 0

    monkeypatch.setattr(cli, "_run", resuming_command)
    try:
        random.seed(0)
        np.random.seed(0)
        expected = (random.random(), np.random.rand())
        random.seed(0)
        np.random.seed(0)
        if fail:
            with pytest.raises(RuntimeError, match="a plug-in crashed"):
                cli.main(["report", "RUN"])
        else:
            assert cli.main(["report", "RUN"]) == 0
        got = (random.random(), np.random.rand())
    finally:
        random.setstate(py_before)
        np.random.set_state(np_before)
    assert got == expected
