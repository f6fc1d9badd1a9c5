"""SIGHUP (the terminal closed, an ssh session dropped) killed the program at once, past the cleanups Ctrl-C runs
(an atomic write's `.NAME.PID-XXXX.tmp`, as large as its result, stayed beside it for good): it now stops the
command as Ctrl-C and SIGTERM do, with exit status 129. Under `nohup` (SIGHUP ignored) it stays ignored."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from imgalign import cli
from tests.conftest import signal_stand_in

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this system")


def test_sighup_mid_command_runs_its_cleanup_and_exits_129(tmp_path, monkeypatch, capsys) -> None:
    import imgalign.commands.train as train
    from imgalign.files import replacing

    target = tmp_path / "model.bin"

    def hung_up_mid_write(args) -> int:
        with replacing(target) as tmp:
            tmp.write_bytes(b"half a checkpoint")
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)  # (the handler runs in here)
        return 0

    monkeypatch.setattr(train, "run_train", hung_up_mid_write)
    monkeypatch.setattr(sys, "argv", ["imgalign", "train"])
    with signal_stand_in(signal.SIGHUP) as stand_in:
        assert cli.console_main() == 129
        assert signal.getsignal(signal.SIGHUP) is stand_in  # the handler is the program's only while it runs
    assert list(tmp_path.iterdir()) == []  # no temporary file, no half-written result
    assert capsys.readouterr().err.startswith("imgalign train: interrupted; every checkpoint written so far")


def test_an_ignored_sighup_stays_ignored(monkeypatch) -> None:
    seen: list[object] = []
    monkeypatch.setattr(cli, "main", lambda argv=None: seen.append(signal.getsignal(signal.SIGHUP)) or 0)
    monkeypatch.setattr(sys, "argv", ["imgalign", "rewards", "list"])
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup imgalign ...` starts it
    try:
        assert cli.console_main() == 0
        assert seen == [signal.SIG_IGN]
    finally:
        signal.signal(signal.SIGHUP, previous)
