"""The ``imgalign`` command. Each subcommand lives in :mod:`imgalign.commands` and exposes ``register(subparsers)``;
its handler takes the parsed namespace and returns an exit status. ``main(argv)`` is callable in-process."""

from __future__ import annotations

import argparse
import codecs
import contextlib
import errno
import importlib
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from imgalign import __version__

try:  # (imported here, not where memory has run out: it loads a shared object)
    import resource
except ImportError:  # not a POSIX system: no address-space limit to name
    resource = None

# Subcommand modules, in the order `imgalign --help` lists them.
COMMAND_MODULES = [
    "imgalign.commands.world",
    "imgalign.commands.evaluate",
    "imgalign.commands.grid",
    "imgalign.commands.report",
    "imgalign.commands.score",
    "imgalign.commands.rewards_cmd",
    "imgalign.commands.train",
]

log = logging.getLogger("imgalign")


class CLIError(Exception):
    """An error to print as one clear line (no traceback) with exit status 2."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with a line saying what was kept and how to go on: the ``imgalign`` program prints it (no traceback)
    and exits with 130; an in-process caller of :func:`main` gets it as the KeyboardInterrupt it is."""


# The commands with subcommands of their own (`imgalign world render`)
COMMAND_GROUPS = ("rewards", "world")

# What a command interrupted by Ctrl-C has kept, and how to go on, for commands that do not say it themselves
INTERRUPT_HINTS = {
    "train": "every checkpoint written so far is whole: add --resume auto to the same command to continue from the "
    "last one",
    "eval": "the images and verdicts written so far are kept: run the same command again to continue",
    "world pretrain": "run the same command again: every component resumes from its last checkpoint in --out",
    "grid": "nothing was written (the grid is saved whole at the end): run the same command again",
    # (its Ctrl-C says what it kept itself; this is for a failure: a full disk, out of memory)
    "score": "the images fully scored so far are kept in a hidden .OUT.partial.jsonl beside --out: run the same "
    "command again to score the rest",
}


def _command_name(args: argparse.Namespace) -> str:
    """``train``, ``world pretrain``, ``rewards check``...: the command and its subcommand, if any."""
    sub = next((v for k, v in vars(args).items() if k.endswith("_command") and isinstance(v, str)), None)
    return f"{args.command} {sub}" if sub else args.command


_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # what argparse reads as a negative number, not an option


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser (each subcommand's too: argparse makes them of the parent's class) whose errors say how to
    give a file name or value that begins with '-': argparse reads such a word as an option, so ``score -a.png``
    was "the following arguments are required: paths" (a path was given) and ``--out -s.jsonl`` "argument --out:
    expected one argument", neither saying what to do."""

    _words: list[str] = []
    # the options of the parsers above a subcommand's (imgalign's own -v), set by build_parser
    _outer: list[str] = []

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        # (an outer parser's option after the command, 'score ... -v', is no file to give as ./-v)
        known = [o for a in self._actions for o in a.option_strings] + self._outer
        dashed = [
            w
            for w in self._words
            if w.startswith("-")
            and not w.startswith("--")
            and len(w) > 1
            and " " not in w
            and not _NUMBER.match(w)
            and not any(o.startswith(w.split("=", 1)[0]) for o in known)
        ]
        wanted = re.match(r"argument (-[^ /:]+(?:/\S+)?): expected one argument", message)
        names = wanted.group(1).split("/") if wanted else []
        # the value meant is the '-' word just after that option as typed (whole, or a --long one shortened), not
        # another '-' word of the command ('score -a.png --out -s.jsonl' told to give --out=-a.png)
        value = next(
            (
                w
                for before, w in zip(self._words, self._words[1:])
                if w in dashed
                and any(
                    n == before or (before.startswith("--") and len(before) > 2 and n.startswith(before))
                    for n in names
                )
            ),
            None,
        )
        if value is not None:
            message += (
                f" (a value that begins with '-', such as {value!r}, is read as an option: give it as "
                f"{names[0]}={value})"
            )
        elif dashed and ("arguments are required" in message or "unrecognized arguments" in message):
            message += (
                f" ({dashed[0]!r} begins with '-', so it is read as an option: give a file that begins with '-' "
                f"as ./{dashed[0]}, or an option's value as --OPTION={dashed[0]})"
            )
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="imgalign", description="Reward alignment for flow-matching T2I models.")
    parser.add_argument("--version", action="version", version=f"imgalign {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _show_defaults(parser)
    _tell_outer_options(parser, [])
    return parser


def _tell_outer_options(parser: argparse.ArgumentParser, outer: list[str]) -> None:
    """Gives each (nested) subcommand's parser the option strings of the parsers above it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            mine = outer + [o for a in parser._actions for o in a.option_strings]
            for p in action.choices.values():
                p._outer = mine
                _tell_outer_options(p, mine)


def _no_default(d: object) -> bool:
    # (0 is a default worth showing; an empty list is not)
    return d is None or d is False or d is argparse.SUPPRESS or (isinstance(d, (list, tuple)) and not d)


class _DefaultsFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help when it has a default its help text does not mention."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if _no_default(d) or not action.option_strings or "default" in text:
            return text
        return f"{text} (default: %(default)s)".strip()


class _RawDescriptionDefaultsFormatter(argparse.RawDescriptionHelpFormatter, _DefaultsFormatter):
    """:class:`_DefaultsFormatter` for a subcommand that asked for a raw description (grid: an example command)."""


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every subcommand's --help shows each option's default (nested subcommands included); a subcommand's own
    raw-description formatter is kept."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for p in action.choices.values():
                raw = issubclass(p.formatter_class, argparse.RawDescriptionHelpFormatter)
                p.formatter_class = _RawDescriptionDefaultsFormatter if raw else _DefaultsFormatter
                for a in p._actions:
                    if a.help is None and not _no_default(a.default) and a.option_strings:
                        a.help = "(default: %(default)s)"
                _show_defaults(p)


def _chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` chose: ``imgalign world pretrain``'s, not ``imgalign``'s."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name not in (subs[0].choices if subs else {}):
            return parser
        parser = subs[0].choices[name]


def unknown_arguments_message(unknown: list[str], parser: argparse.ArgumentParser) -> str:
    """argparse's "unrecognized arguments" line, with the closest option of the command for each unknown one
    (``--rewards`` -> ``--reward``, ``--output_dir`` -> ``--output-dir``)."""
    import difflib

    known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for tok in unknown:
        if tok.startswith("--"):
            close = difflib.get_close_matches(tok.split("=", 1)[0].replace("_", "-"), known, n=1, cutoff=0.7)
            hints += [f"{tok.split('=', 1)[0]}: did you mean {close[0]}?"] if close else []
    # imgalign's own options after the command ('score ... -v'): argparse reads them only before it
    outer = [tok for tok in unknown if tok in ("-v", "--verbose", "--version")]
    if outer:
        command = parser.prog.split(" ", 1)[1] if " " in parser.prog else "COMMAND"
        # (--version runs no command: "imgalign --version rewards list ..." only prints the version)
        where = "imgalign --version" if outer[0] == "--version" else f"imgalign {outer[0]} {command} ..."
        hints.append(f"{outer[0]} is imgalign's own option: give it before the command, {where}")
    found = f"unrecognized arguments: {' '.join(unknown)}"
    return found + (f" ({'; '.join(hints)})" if hints else "")


def argv_words(argv: Sequence[object] | None) -> list[str] | None:
    """`argv` of an in-process :func:`main` call as argparse takes it: a path (``Path``) or a number given as an item
    is its text; one string for the whole command, or an item of another type, is a TypeError saying what to give
    (``main("rewards list")`` was "invalid choice: 'r'", and a Path item "'PosixPath' object is not
    subscriptable")."""
    if argv is None:
        return None
    if isinstance(argv, (str, bytes)):
        raise TypeError(
            f"main() takes the command as a list of words, e.g. main({str(argv).split()!r}), not one string "
            f"({argv!r}); shlex.split(text) splits a command line as a shell does"
        )
    words = []
    for i, item in enumerate(argv):
        if isinstance(item, os.PathLike):
            item = os.fspath(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            item = str(item)
        if not isinstance(item, str):
            raise TypeError(
                f"main(): item {i} of the command is {item!r} ({type(item).__name__}); give each word as a string "
                "(paths and numbers are turned into text)"
            )
        words.append(item)
    return words


def main(argv: Sequence[object] | None = None) -> int:
    argv = argv_words(argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # (what parse_args does, from the command's own parser, with the closest options named)
        sub = _chosen_parser(parser, args)
        sub.error(unknown_arguments_message(unknown, sub))
    # imgalign's own messages at INFO; libraries' (open_clip logs on the root logger) only from WARNING, unless -v.
    # basicConfig adds a handler where the root logger has none. The levels and that handler hold for this call
    # only: an in-process caller gets its own back (an earlier main(["-v", ...]) had left the root logger at DEBUG,
    # and a caller's INFO logging was silenced after any call; the handler left behind formatted the caller's own
    # log lines as imgalign's and made the caller's later logging.basicConfig(...) do nothing)
    root, own = logging.getLogger(), logging.getLogger("imgalign")
    handlers = list(root.handlers)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    added = [h for h in root.handlers if h not in handlers]
    saved = root.level, own.level
    root.setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    own.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    warn_of_thread_settings(os.environ)
    bars = library_bars_off() if getattr(args, "no_progress", False) else contextlib.nullcontext()
    # notices said once per command are said again by the next call, as a fresh process says them (a notebook's
    # second `score` of a folder with dangling image links read it as fewer images without a word)
    images_io = sys.modules.get("imgalign.rewards.io")  # (not imported yet: nothing was said)
    if images_io is not None:
        images_io.forget_notices()
    try:
        with bars, rngs_kept():
            return _run(args)
    finally:
        root.setLevel(saved[0])
        own.setLevel(saved[1])
        for handler in added:
            root.removeHandler(handler)


def warn_of_thread_settings(env: Mapping[str, str]) -> None:
    """A warning for an OMP_NUM_THREADS or MKL_NUM_THREADS that is no thread count (``abc``, ``0``): torch ignores
    it and runs its default thread count, so the README's ``OMP_NUM_THREADS=1`` for a busy machine was lost with
    only libgomp's "Invalid value for environment variable" (no command, no consequence). OpenMP's list form
    (``4,2``) is a count."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        value = env.get(name)
        if value is None or not value.strip():
            continue
        parts = [p.strip() for p in value.split(",")]
        if not all(p.isdecimal() and int(p) >= 1 for p in parts):
            import torch

            log.warning(
                "%s=%r is not a thread count (a whole number of at least 1): torch ignores it and runs %d threads; "
                "set it to a number, e.g. %s=1 on a machine whose cores are busy",
                name,
                value,
                torch.get_num_threads(),
                name,
            )


@contextlib.contextmanager
def rngs_kept() -> Iterator[None]:
    """An in-process caller's global random states (Python's ``random``, NumPy's, torch's CPU generator and CUDA's
    once CUDA is in use) are back as they were after the command, which ended or raised: ``train`` seeds torch's
    global generator (so that a reward's fresh head draws the same on every run), as the fitting of reward heads
    and the pretraining do, and ``train --resume`` sets all three from the checkpoint, so a notebook's
    ``torch.manual_seed(0)`` or ``np.random.seed(0)`` followed by a command drew the command's numbers after it. A
    library not imported yet has drawn nothing for the caller."""
    import random

    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    py = random.getstate()
    np_state = numpy.random.get_state() if numpy is not None else None
    cpu = torch.random.get_rng_state() if torch is not None else None
    cuda = (
        torch.cuda.get_rng_state_all()
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
        else None
    )
    try:
        yield
    finally:
        random.setstate(py)
        if np_state is not None:
            numpy.random.set_state(np_state)
        if cpu is not None:
            torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


@contextlib.contextmanager
def library_bars_off() -> Iterator[None]:
    """``--no-progress`` (and a training config's ``log.progress: false``) also silences the libraries' own bars for
    this call (diffusers' "Loading pipeline components", transformers' "Loading weights" and checkpoint shards); the
    caller's settings come back after."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    libs = [m for m in (diffusers_logging, transformers_logging) if m.is_progress_bar_enabled()]
    for m in libs:
        m.disable_progress_bar()
    try:
        yield
    finally:
        for m in libs:
            m.enable_progress_bar()


def _run(args: argparse.Namespace) -> int:
    """The chosen command; a user error becomes one line on stderr and exit status 2."""
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as e:
        name = _command_name(args)
        if isinstance(e, Interrupted):  # the command said what it kept
            raise Interrupted(f"imgalign {name}: {e}") from None
        hint = INTERRUPT_HINTS.get(name)
        raise Interrupted(f"imgalign {name}: interrupted" + (f"; {hint}" if hint else "")) from None
    except SystemExit as e:
        # imgalign's commands never exit so (argparse's exits come before this): the user's own code, a plug-in
        # reward, balancer or objective calling sys.exit(), ended the command without a word (sys.exit(0) as a
        # success)
        if args.verbose:
            raise
        print(f"imgalign {_command_name(args)}: error: {exit_called_message(e)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader of stdout went away (`imgalign ... | head`): nothing is wrong with the work, so no error line;
        # stdout goes to devnull so that Python's flush at exit does not raise again (the Python docs' recipe)
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (CLIError, ValueError, OSError, KeyError) as e:
        # user errors (bad config keys, missing or unreadable files, an output path that is a file, unknown names)
        # get one clear line, not a traceback; -v shows it
        if args.verbose:
            raise
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        if isinstance(e, OSError) and not e.filename and _stdout_refuses_writes():
            # a print to a stdout that takes nothing (`> /dev/full`, unbuffered): no output file is at fault
            msg = stdout_failure_message(
                e, INTERRUPT_HINTS.get(_command_name(args), "then run the same command again")
            )
        elif isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            # a write cut short (full disk, file-size limit): Python's text says nothing to do, and names no file
            # or, for a copy (eval --images copies the folder into --out), the file copied before the one written
            out = getattr(args, "out", None) or getattr(args, "output_dir", None)
            written = next((f for f in (e.filename2, e.filename) if isinstance(f, (str, bytes))), None)
            name = _command_name(args)
            hint = (
                "a render does not resume: delete --out (or give a new one) and run the same command again"
                if name == "world render"
                else INTERRUPT_HINTS.get(name, "then run the same command again")
            )
            msg = (
                f"{e.strerror} while writing "
                + (f"{os.fsdecode(written)!r}" if written else "an output file")
                + (f" under {str(out)!r}" if out and not written else "")
                + f": {ROOM_ADVICE.get(e.errno, ROOM_ADVICE[errno.ENOSPC])}; {hint}"
            )
        if isinstance(e, OSError) and e.errno == errno.ENAMETOOLONG:
            # Python's "[Errno 36] File name too long: '<the whole name>'" said nothing to do
            msg = name_too_long_message(str(e.filename or ""))
        # `imgalign world render: error: ...`, as argparse names the subcommand in its own errors
        print(f"imgalign {_command_name(args)}: error: {msg}", file=sys.stderr)
        return 2
    except Exception as e:
        from imgalign.hub import hub_address_failure, proxy_failure

        # a proxy that refused a Hub request, or an HF_ENDPOINT that is no URL (huggingface_hub raises its HTTP
        # client's ProxyError and UnsupportedProtocol, no OSError)
        if args.verbose or (msg := proxy_failure(e) or hub_address_failure(e)) is None:
            raise
        print(f"imgalign {_command_name(args)}: error: {msg}", file=sys.stderr)
        return 2


def exit_called_message(e: SystemExit) -> str:
    """The error for a ``sys.exit(code)`` called by code a command ran, naming the file and line it was called at
    (the innermost frame of its traceback)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else ""
    return (
        f"sys.exit({e.code!r}) was called{where}, which ended the command: a plug-in (a reward, balancer, objective, "
        "rollout or penalty given as module:attr) must raise an exception to stop it; imgalign -v ... shows the "
        "traceback"
    )


ROOM_ADVICE = {
    errno.ENOSPC: "free disk space (or raise the file-size limit, ulimit -f)",
    # EFBIG is the file-size limit, not a full disk: "free disk space" sent the user to a disk with room to spare
    errno.EFBIG: (
        "the file-size limit stopped it (the shell's ulimit -f, or the largest file the file system takes): raise "
        "it (ulimit -f unlimited) or write to another file system"
    ),
}
"""What to do after a write cut short, by its errno (a quota, EDQUOT, as a full disk)."""


def _stdout_refuses_writes() -> bool:
    """Whether a write of nothing to the program's stdout fails (``> /dev/full`` refuses even that): then a failed
    write that named no file was a print, not an output file. A stdout that is no file (an in-process caller's
    StringIO) or that is closed takes part in nothing here."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    try:
        os.write(fd, b"")
    except OSError:
        return True
    return False


def stdout_failure_message(e: OSError, then: str) -> str:
    """The error line's text for a write to stdout that failed (`e`), other than the reader of a pipe leaving:
    Python's "No space left on device" (or its "Exception ignored in: <_io.TextIOWrapper name='<stdout>'>" at exit)
    named no file, and an output file was blamed for it."""
    why = e.strerror or str(e)
    return (
        f"{why} while writing standard output (the lines the command prints): point it at a disk with free space "
        f"or elsewhere (> FILE, or > /dev/null to drop them); {then}"
    )


def name_too_long_message(name: str) -> str:
    """The error line for ENAMETOOLONG on path `name`: the name over 255 bytes, or, where every name is shorter, the
    whole path's length (Linux takes at most 4096 bytes; the line said "a folder or file name of 13 bytes")."""
    if not name:  # the error named no file: "path ''" named nothing
        return (
            "a path given is too long for the file system (most take at most 255 bytes per folder or file name, "
            "4096 in a path): give a shorter one"
        )
    shown = name if len(name) <= 80 else f"{name[:60]}...{name[-12:]}"
    # os.fsencode: a name that is not UTF-8 (its bytes read back as surrogates) failed str.encode() here
    longest = max((len(os.fsencode(part)) for part in Path(name).parts), default=0)
    if longest > 255:
        why = f"a folder or file name of {longest} bytes; most file systems take at most 255 bytes per name"
        return f"path {shown!r} is too long for the file system ({why}): give a shorter name"
    why = f"the whole path is {len(os.fsencode(name))} bytes; most systems take at most 4096 bytes in a path"
    return f"path {shown!r} is too long for the file system ({why}): give a shorter path"


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[list[int]]:
    """SIGTERM (``kill PID``, a job scheduler or container stopping the job) raises KeyboardInterrupt in the main
    thread, as Ctrl-C does, while the block runs: the command stops the way Ctrl-C stops it (its worker processes
    too) and says what it kept, where Python's default died at once without a word (and left ``world pretrain``'s
    workers training on). The list it yields gets the signal's number once one arrived.

    SIGHUP (the terminal closed, an ssh session dropped) likewise: its default killed the program at once, past the
    cleanups that Ctrl-C runs (an atomic write's ``.NAME.PID-XXXX.tmp`` beside its file, as large as the result and
    never removed by a rerun). A SIGHUP that is ignored (``nohup imgalign ...``) stays ignored."""
    got: list[int] = []

    def stop(signum: int, frame: object) -> None:
        got.append(signum)
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set a handler
        yield got
        return
    watched = [signal.SIGTERM]
    hangup = getattr(signal, "SIGHUP", None)  # (none on Windows)
    if hangup is not None and signal.getsignal(hangup) is not signal.SIG_IGN:
        watched.append(hangup)
    previous = {signum: signal.signal(signum, stop) for signum in watched}
    try:
        yield got
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def starting_interrupted(argv: list[str]) -> str:
    """The line for Ctrl-C or SIGTERM before a command ran (while the libraries import or the parser is built):
    the command as typed (``imgalign score``, ``imgalign world render``), and that it wrote nothing, where the line
    was "imgalign: interrupted" for every command."""
    return f"{typed_command(argv)}: interrupted while starting, before it wrote anything"


def typed_command(argv: list[str]) -> str:
    """``imgalign score``, ``imgalign world render``: the program and the command words of `argv`, as typed."""
    words: list[str] = []
    for tok in argv:
        if tok.startswith("-") and not words:  # -v before the command
            continue
        if not re.fullmatch(r"[a-z][a-z0-9-]*", tok) or (words and words[0] not in COMMAND_GROUPS):
            break
        words.append(tok)
        if len(words) == 2:
            break
    return " ".join(["imgalign", *words])


def _escape_unencodable(stream: object) -> None:
    """Print what `stream`'s encoding cannot hold backslash-escaped (``\\udce9``), as Python's stderr does: a path
    whose name is not UTF-8 (its bytes read as lone surrogates) on a strict UTF-8 stdout (LANG=en_US.UTF-8) failed
    the closing "wrote PATH" line, after the work was done, with "'utf-8' codec can't encode character" and exit
    status 2. The program's own stdout only: an in-process caller of :func:`main` keeps its stream as it is.
    A stdout that gives such names back as their bytes (surrogateescape: the C locale without UTF-8 mode,
    ``LC_ALL=C PYTHONUTF8=0``) keeps doing so, and escapes the other characters it cannot hold: "Fréchet" in
    `imgalign rewards list` failed there with "'ascii' codec can't encode character '\\xe9'" and a cut list."""
    errors = getattr(stream, "errors", None)
    if errors in ("strict", "surrogateescape") and hasattr(stream, "reconfigure"):
        stream.reconfigure(errors="backslashreplace" if errors == "strict" else _BYTES_OR_ESCAPED)


def _bytes_or_escaped(err: UnicodeError) -> tuple[str | bytes, int]:
    """The encode error handler :data:`_BYTES_OR_ESCAPED`: a file name's undecodable bytes (lone surrogates
    U+DC80..U+DCFF) as those bytes, as surrogateescape writes them; any other character backslash-escaped. A span
    that mixes both (an accent beside a name's bytes) is handled a run of one kind at a time: it escaped the name's
    bytes too."""
    if not isinstance(err, UnicodeEncodeError):
        return codecs.lookup_error("backslashreplace")(err)
    is_byte = [0xDC80 <= ord(c) <= 0xDCFF for c in err.object[err.start : err.end]]
    run = next((i for i, b in enumerate(is_byte) if b != is_byte[0]), len(is_byte))
    part = UnicodeEncodeError(err.encoding, err.object, err.start, err.start + run, err.reason)
    return codecs.lookup_error("surrogateescape" if is_byte[0] else "backslashreplace")(part)


_BYTES_OR_ESCAPED = "imgalign.bytes_or_escaped"
codecs.register_error(_BYTES_OR_ESCAPED, _bytes_or_escaped)


def console_main() -> int:
    """The ``imgalign`` program: :func:`main`, with Ctrl-C as one line on stderr (what was kept, how to go on) and
    exit status 130 instead of a traceback; SIGTERM likewise, with exit status 143 (128 + 15), and SIGHUP with 129."""
    _escape_unencodable(sys.stdout)
    stderr = sys.stderr
    sys.stderr = DiagnosticsStream(stderr)
    try:
        return _console_main()
    finally:
        sys.stderr = stderr
        try:
            if stderr is not None:
                stderr.flush()
        except (OSError, ValueError):
            # what is left in its buffer goes nowhere: not "Exception ignored", exit 120
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), stderr.fileno())


class DiagnosticsStream:
    """The program's stderr: progress bars, log lines and error lines, whose loss must not stop the work. A stderr
    that refuses writes (``2> /dev/full``, a log file on a full disk, ``2>&1 | head`` once head quit) or that is
    closed (``2>&-``) made the first progress bar raise, so `score` and `eval` ended before scoring anything,
    with exit status 1 and no line anywhere. Writes that fail are dropped; everything else is the stream's own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            return self._stream.write(text)
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:  # closed at start: Python set sys.stderr to None
            raise AttributeError(name)
        return getattr(self._stream, name)


def _console_main() -> int:
    try:
        os.getcwd()
    except FileNotFoundError:
        # torch does not even import there: "Intel oneMKL FATAL ERROR: Cannot load .../libtorch_cpu.so", exit 2
        print(
            f"{typed_command(sys.argv[1:])}: error: the current folder no longer exists (it was deleted or moved "
            "after the shell went into it): cd to a folder that exists and run the same command again",
            file=sys.stderr,
        )
        return 2
    with _sigterm_interrupts() as terminated:
        try:
            status = main()
        except SystemExit as e:  # argparse's --help, --version and usage errors
            raise SystemExit(_stdout_flushed(e.code, sys.argv[1:])) from None
        except KeyboardInterrupt as e:
            # one before the command started (while torch imports, seconds) has no message of the command's own;
            # after SIGHUP the terminal may be gone, and writing to it fails (EIO)
            with contextlib.suppress(OSError):
                print(
                    str(e) if isinstance(e, Interrupted) else starting_interrupted(sys.argv[1:]),
                    file=sys.stderr,
                )
            return 128 + terminated[0] if terminated else 130
        except (MemoryError, RuntimeError, ImportError, SystemError) as e:
            msg = out_of_memory_message(e, sys.argv[1:])
            if msg is None or {"-v", "--verbose"} & set(sys.argv[1:]):
                raise
            print(msg, file=sys.stderr)
            return 2
    return _stdout_flushed(status, sys.argv[1:])


def out_of_memory_message(e: BaseException, argv: list[str]) -> str | None:
    """The error line for a command that ran out of memory, or None where `e` is no such failure: a MemoryError
    (numpy's "Unable to allocate 48.0 MiB for an array", PIL's copy), torch's "can't allocate memory" and, under an
    address-space limit (``ulimit -v``), the libraries failing to load ("libtorch_cpu.so: failed to map segment
    from shared object", "error return without exception set") were a traceback of thirty lines."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0] if resource is not None else -1
    limited = resource is not None and limit != resource.RLIM_INFINITY
    if isinstance(e, RuntimeError) and "can't allocate memory" not in str(e):
        return None
    if isinstance(e, (ImportError, SystemError)) and not limited:
        return None
    text = str(e).lower()
    if (
        isinstance(e, ImportError)
        and "failed to map segment" not in text
        and "cannot allocate memory" not in text
    ):
        return None  # a module missing (a cluster's ulimit -v set for every job): not memory
    name = typed_command(argv)
    detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    where = f" under the address-space limit ulimit -v {limit // 1024} KiB" if limited else ""
    hint = INTERRUPT_HINTS.get(name.removeprefix("imgalign "), "then run the same command again")
    return (
        f"{name}: error: out of memory{where} ({detail}): give it more memory (raise or lift ulimit -v; torch "
        f"alone takes about 4 GB of address space to load; close other programs) or use smaller batches; {hint}"
    )


def _stdout_flushed(status: Any, argv: list[str]) -> Any:
    """`status`, once what the command printed has left stdout's buffer. Python flushed it at exit, after the
    command: a reader gone (``imgalign rewards list | grep -q clip``) or a full disk or device (``> /dev/full``)
    came out as "Exception ignored in: <_io.TextIOWrapper name='<stdout>'...>" and exit status 120. Now a reader
    gone is quiet with exit status 1 (as :func:`_run` has it mid-command), and a failed write one error line with
    exit status 2; stdout then goes to devnull, so that the flush at exit does not raise again."""
    stream = sys.stdout
    try:
        if stream is not None:
            stream.flush()
        return status
    except OSError as e:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        if status is not None and status != 0:  # the command has failed, and said so already
            return status
        if isinstance(e, BrokenPipeError):
            return 1
        then = "the command itself finished"
        print(f"{typed_command(argv)}: error: {stdout_failure_message(e, then)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(console_main())
