"""An in-process `main()` on a root logger without handlers (a notebook, a script that has not set up logging)
shows imgalign's messages during the call and takes its handler away after it: the handler left behind formatted the
caller's own log lines as imgalign's and made the caller's later `logging.basicConfig(...)` do nothing."""

from __future__ import annotations

import logging

from imgalign.cli import main


def test_the_handler_main_adds_is_gone_after_the_call(monkeypatch, capsys) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # (pytest's capture handlers set aside for this test)
    monkeypatch.setenv("OMP_NUM_THREADS", "abc")  # a warning logged during the call
    assert main(["rewards", "list"]) == 0
    err = capsys.readouterr().err
    assert (
        "WARNING imgalign: OMP_NUM_THREADS='abc' is not a thread count" in err
    )  # shown, in imgalign's format
    assert root.handlers == []
    logging.basicConfig(format="caller: %(message)s")  # the caller's own set-up takes effect
    assert [h.formatter._fmt for h in root.handlers] == ["caller: %(message)s"]


def test_a_callers_own_handler_is_kept_and_none_is_added(monkeypatch) -> None:
    root = logging.getLogger()
    mine = logging.StreamHandler()
    monkeypatch.setattr(root, "handlers", [mine])
    assert main(["rewards", "list"]) == 0
    assert root.handlers == [mine]
