"""Mutation round 31b: imgalign/cli.py's error lines for imgalign's own options after the command, a copy cut
short by a full disk, and -v with a Hub proxy failure."""

from __future__ import annotations

import argparse
import errno

import pytest

from imgalign.cli import _run, main


@pytest.mark.parametrize("option", ["--verbose", "--version"])
def test_imgalign_s_long_own_options_after_the_command_say_to_give_them_before(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rewards list --version` (as `-v`) is imgalign's own option: the line says where it goes. --version runs no
    command, so its example is `imgalign --version` alone (`imgalign --version rewards list ...` printed only the
    version)."""
    with pytest.raises(SystemExit) as e:
        main(["rewards", "list", option])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    where = "imgalign --version" if option == "--version" else f"imgalign {option} rewards list ..."
    assert err == (
        f"imgalign rewards list: error: unrecognized arguments: {option} ({option} is imgalign's own option: give "
        f"it before the command, {where})"
    )


def _failing(error: BaseException, **extra: object) -> argparse.Namespace:
    def func(args: argparse.Namespace) -> int:
        raise error

    return argparse.Namespace(command="eval", verbose=False, func=func, **extra)


def test_a_copy_cut_short_names_the_file_being_written_not_the_one_copied(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A copy (eval --images) cut short by a full disk carries the source as filename and the file being written as
    filename2: the line names the one written."""
    error = OSError(errno.ENOSPC, "No space left on device", "src/0001.png", None, "out/0001.png")
    assert _run(_failing(error, out="out")) == 2
    err = capsys.readouterr().err
    assert "No space left on device while writing 'out/0001.png': free disk space" in err
    assert "src/0001.png" not in err


def test_v_shows_a_hub_proxy_failure_as_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """Without -v a proxy refusing the Hub is one line; with -v the error itself is raised (its traceback)."""

    class ProxyError(Exception):  # what huggingface_hub's HTTP client raises, by name
        pass

    assert _run(_failing(ProxyError("407 Proxy Authentication Required"))) == 2
    assert "could not be reached through the proxy" in capsys.readouterr().err
    args = _failing(ProxyError("407 Proxy Authentication Required"))
    args.verbose = True
    with pytest.raises(ProxyError):
        _run(args)


@pytest.mark.parametrize(
    "error",
    [SystemError("error return without exception set"), ImportError("libfoo.so: cannot allocate memory")],
)
def test_without_an_address_space_limit_a_library_load_failure_is_not_called_out_of_memory(
    error: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SystemError and ImportError are out of memory only under ulimit -v (the libraries failing to map); without
    one they are other failures and keep their traceback."""
    resource = pytest.importorskip("resource")
    from imgalign.cli import out_of_memory_message

    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert out_of_memory_message(error, ["score"]) is None
    monkeypatch.setattr(resource, "getrlimit", lambda which: (2_000_000 * 1024, resource.RLIM_INFINITY))
    assert "out of memory under the address-space limit" in (out_of_memory_message(error, ["score"]) or "")
