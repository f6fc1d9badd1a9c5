"""A current folder deleted (or moved) after the shell went into it (`cd d; rm -rf ../d; imgalign ...`): torch does
not even import there, and every command, relative paths or none, died with "Intel oneMKL FATAL ERROR: Cannot load
.../torch/lib/libtorch_cpu.so." and exit status 2."""

from __future__ import annotations

import errno
import os
import sys

import pytest

from imgalign import cli


def test_a_deleted_current_folder_is_one_line_saying_to_cd(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    def gone() -> str:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")

    def must_not_run(argv=None) -> int:
        raise AssertionError("the command ran in a folder that does not exist")

    monkeypatch.setattr(os, "getcwd", gone)
    monkeypatch.setattr(cli, "main", must_not_run)
    monkeypatch.setattr(sys, "argv", ["imgalign", "world", "render", "--prompts", "p.jsonl", "--out", "r"])
    assert cli.console_main() == 2
    assert capsys.readouterr().err == (
        "imgalign world render: error: the current folder no longer exists (it was deleted or moved after the "
        "shell went into it): cd to a folder that exists and run the same command again\n"
    )
