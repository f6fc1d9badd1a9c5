"""The `imgalign` program's stdout going nowhere: a reader that quit (``imgalign rewards list | grep -q clip``) or a
full device (``> /dev/full``). Python flushes a buffered stdout at exit, after the command, and said
"Exception ignored in: <_io.TextIOWrapper name='<stdout>'...>" with exit status 120; an unbuffered stdout
(PYTHONUNBUFFERED=1) that refused a print was blamed on an output file ("while writing an output file under
'OUT': free disk space")."""

from __future__ import annotations

import errno
import io
import sys

import pytest

from imgalign import cli
from tests.conftest import stdout_on_dev_full


class _Refusing(io.RawIOBase):
    """A stdout's raw stream whose writes fail with `error` while `refuse` is set (as a pipe whose reader left, or
    /dev/full)."""

    def __init__(self, error: OSError) -> None:
        self.error, self.refuse, self.got = error, True, b""

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if self.refuse:
            raise self.error
        self.got += bytes(data)
        return len(data)


@pytest.fixture
def refusing_stdout(monkeypatch: pytest.MonkeyPatch):
    """sys.stdout buffered as a program's is when redirected, over a raw stream that refuses; afterwards it takes
    the writes again, so that the stream's own flush when it is collected does not fail."""
    raws: list[_Refusing] = []

    def make(error: OSError) -> _Refusing:
        raw = _Refusing(error)
        raws.append(raw)
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8"))
        return raw

    yield make
    for raw in raws:
        raw.refuse = False


@pytest.mark.parametrize("argv", [["rewards", "list"], ["--help"]])
def test_a_reader_gone_at_exit_is_quiet_with_status_1(refusing_stdout, monkeypatch, capsys, argv) -> None:
    refusing_stdout(BrokenPipeError(errno.EPIPE, "Broken pipe"))
    monkeypatch.setattr(sys, "argv", ["imgalign", *argv])
    if argv == ["--help"]:
        with pytest.raises(SystemExit) as got:
            cli.console_main()
        assert got.value.code == 1
    else:
        assert cli.console_main() == 1
    assert capsys.readouterr().err == ""


def test_a_full_stdout_at_exit_is_one_line_naming_stdout(refusing_stdout, monkeypatch, capsys) -> None:
    refusing_stdout(OSError(errno.ENOSPC, "No space left on device"))
    monkeypatch.setattr(sys, "argv", ["imgalign", "rewards", "list"])
    assert cli.console_main() == 2
    assert capsys.readouterr().err == (
        "imgalign rewards list: error: No space left on device while writing standard output (the lines the "
        "command prints): point it at a disk with free space or elsewhere (> FILE, or > /dev/null to drop them); "
        "the command itself finished\n"
    )


def test_a_command_that_failed_keeps_its_status_and_says_nothing_more(
    refusing_stdout, monkeypatch, capsys
) -> None:
    import imgalign.commands.rewards_cmd as rewards_cmd

    def printed_then_failed(args) -> int:
        print("a table")
        print("imgalign rewards list: error: one file failed", file=sys.stderr)
        return 1

    monkeypatch.setattr(rewards_cmd, "run_list", printed_then_failed)
    refusing_stdout(OSError(errno.ENOSPC, "No space left on device"))
    monkeypatch.setattr(sys, "argv", ["imgalign", "rewards", "list"])
    assert cli.console_main() == 1
    assert capsys.readouterr().err == "imgalign rewards list: error: one file failed\n"


def test_an_unbuffered_print_to_dev_full_names_stdout_not_an_output_file(monkeypatch, capsys) -> None:
    with stdout_on_dev_full(monkeypatch):
        assert cli.main(["rewards", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "imgalign rewards list: error: No space left on device while writing standard output"
    )
    assert "output file" not in err
