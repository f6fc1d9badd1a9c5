"""Mutation round 29 (helper i) on imgalign.cli: a write failure that names its file is blamed on that file even
while stdout refuses writes too (``> /dev/full``), and the C-locale stdout's error handler writes only a non-UTF-8
name's undecodable bytes (U+DC80..U+DCFF, each run of them whole) back as bytes, escaping every other character;
a failed print says how the command goes on, and out of memory without ``ulimit -v`` names no limit."""

from __future__ import annotations

import argparse
import errno
import io

import pytest

from imgalign import cli
from tests.conftest import stdout_on_dev_full


def test_a_full_disk_naming_its_file_names_that_file_even_with_stdout_on_dev_full(
    monkeypatch, capsys
) -> None:
    import imgalign.commands.report as report

    def full_disk(args: argparse.Namespace) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", "rep/summary.md")

    monkeypatch.setattr(report, "run_report", full_disk)
    with stdout_on_dev_full(monkeypatch):
        assert cli.main(["report", "run"]) == 2
    err = capsys.readouterr().err
    assert "No space left on device while writing 'rep/summary.md': free disk space" in err
    assert "standard output" not in err


def _c_locale_stdout() -> tuple[io.BytesIO, io.TextIOWrapper]:
    """Python's stdout under ``LC_ALL=C PYTHONUTF8=0``: ASCII with surrogateescape, as imgalign sets it up."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", errors="surrogateescape", write_through=True)
    cli._escape_unencodable(stream)
    return raw, stream


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("a\udc80\udcff\n", b"a\x80\xff\n"),  # the first and the last of surrogateescape's range: bytes
        (
            "a\udc7f\udc00\n",
            b"a\\udc7f\\udc00\n",
        ),  # lone surrogates below it (a prompt's JSON "\udc00"): escaped
        ("Fr\xe9\udce9\n", b"Fr\\xe9\xe9\n"),  # an accent next to a name's byte: each as its own kind
    ],
    ids=["range-ends", "below-range", "mixed-run"],
)
def test_the_c_locale_stdout_writes_only_undecodable_bytes_back_and_escapes_the_rest(text, written) -> None:
    raw, stream = _c_locale_stdout()
    stream.write(text)
    assert raw.getvalue() == written


def test_a_print_to_dev_full_mid_train_says_how_train_goes_on(monkeypatch, capsys) -> None:
    import imgalign.commands.train as train

    def prints(args: argparse.Namespace) -> int:
        print("step 1")
        return 0

    monkeypatch.setattr(train, "run_train", prints)
    with stdout_on_dev_full(monkeypatch):
        assert cli.main(["train", "--output-dir", "runs/x"]) == 2
    err = capsys.readouterr().err
    assert "while writing standard output" in err
    assert err.rstrip("\n").endswith("add --resume auto to the same command to continue from the last one")


def test_out_of_memory_without_an_address_space_limit_names_no_limit(monkeypatch) -> None:
    unlimited = (cli.resource.RLIM_INFINITY, cli.resource.RLIM_INFINITY)
    monkeypatch.setattr(cli.resource, "getrlimit", lambda which: unlimited)
    msg = cli.out_of_memory_message(
        MemoryError("Unable to allocate 48.0 MiB for an array"), ["score", "imgs"]
    )
    assert msg is not None and msg.startswith(
        "imgalign score: error: out of memory (Unable to allocate 48.0 MiB for an array): "
    )
