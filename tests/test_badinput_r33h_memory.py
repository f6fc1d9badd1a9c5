"""A command out of memory (``ulimit -v`` low, a batch too big): numpy's "Unable to allocate 48.0 MiB for an
array" mid-`score`, and under the limit the libraries failing to load ("libtorch_cpu.so: failed to map segment from
shared object"), were a traceback of thirty lines. Now one line: out of memory, the limit, what to do."""

from __future__ import annotations

import resource
import sys

import pytest

from imgalign import cli


def _raising(error: BaseException):
    def run(argv=None) -> int:
        raise error

    return run


@pytest.mark.parametrize(
    "error, detail",
    [
        (
            MemoryError("Unable to allocate 48.0 MiB for an array"),
            "(Unable to allocate 48.0 MiB for an array)",
        ),
        (MemoryError(), "(MemoryError)"),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 bytes"), "can't"),
    ],
)
def test_out_of_memory_is_one_line(monkeypatch, capsys, error, detail) -> None:
    monkeypatch.setattr(cli, "main", _raising(error))
    monkeypatch.setattr(sys, "argv", ["imgalign", "score", "imgs", "--reward", "clip", "--out", "s.jsonl"])
    assert cli.console_main() == 2
    err = capsys.readouterr().err
    assert err.startswith("imgalign score: error: out of memory") and detail in err
    assert "raise or lift ulimit -v" in err and "smaller batches" in err and err.count("\n") == 1


def test_a_library_that_cannot_map_under_ulimit_v_names_the_limit(monkeypatch, capsys) -> None:
    monkeypatch.setattr(
        cli, "main", _raising(ImportError("libtorch_cpu.so: failed to map segment from shared object"))
    )
    monkeypatch.setattr(resource, "getrlimit", lambda which: (2_000_000 * 1024, resource.RLIM_INFINITY))
    monkeypatch.setattr(sys, "argv", ["imgalign", "eval", "--ground-truth", "--out", "e"])
    assert cli.console_main() == 2
    assert capsys.readouterr().err.startswith(
        "imgalign eval: error: out of memory under the address-space limit ulimit -v 2000000 KiB (libtorch_cpu.so: "
        "failed to map segment from shared object)"
    )


@pytest.mark.parametrize(
    "error, argv",
    [
        (ImportError("No module named 'torch'"), ["score"]),  # no memory limit: a broken install, not memory
        (RuntimeError("shapes do not match"), ["score"]),
        (MemoryError(), ["-v", "score"]),  # -v shows the traceback
    ],
)
@pytest.mark.parametrize(
    "limit", [resource.RLIM_INFINITY, 64 * 2**30], ids=["unlimited", "a cluster's ulimit -v"]
)
def test_other_failures_and_verbose_keep_their_traceback(monkeypatch, error, argv, limit) -> None:
    monkeypatch.setattr(cli, "main", _raising(error))
    monkeypatch.setattr(resource, "getrlimit", lambda which: (limit, resource.RLIM_INFINITY))
    monkeypatch.setattr(sys, "argv", ["imgalign", *argv])
    with pytest.raises(type(error)):
        cli.console_main()
