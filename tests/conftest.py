import contextlib
import json
import logging
import os
from collections.abc import Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def copy_with_json(src: Path, dst: Path, name: str, **changes: object) -> Path:
    """A copy of the model folder `src` at `dst` whose JSON file `name` has the top-level `changes` (a tokenizer's
    ``model_max_length``)."""
    import shutil

    shutil.copytree(src, dst)
    path = dst / name
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return dst


def noise_pngs(folder: Path, n: int, seed: int = 0) -> Path:
    """`n` random 16x16 RGB PNGs in `folder` (made), named 000.png, 001.png, ...: a class folder for the
    rewards commands' folder checks."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        Image.fromarray((rng.random((16, 16, 3)) * 255).astype(np.uint8)).save(folder / f"{i:03d}.png")
    return folder


def two_run_folders(root: Path) -> None:
    """root/runs/a: a run with a checkpoint and its config; root/runs/b: a copy of it whose config still names
    runs/a (the train command's run-folder checks)."""
    run = root / "runs" / "a"
    (run / "checkpoints" / "step-000001").mkdir(parents=True)
    (run / "config.yaml").write_text("log:\n  output_dir: runs/a\n")
    copy = root / "runs" / "b"
    (copy / "checkpoints").mkdir(parents=True)
    (copy / "config.yaml").write_text("log:\n  output_dir: runs/a\n")


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _fresh_accelerate_state() -> Iterator[None]:
    """Each test ends with accelerate's process-wide state cleared, as a fresh process has it: a trainer a test set
    up directly (not through ``imgalign train``, which clears the state it made) left it fixed, and a later test
    asking for another mixed precision failed with "AcceleratorState has already been initialized", depending on
    the order the tests ran in."""
    yield
    import sys

    if "accelerate.state" in sys.modules:
        sys.modules["accelerate.state"].AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture(scope="module")
def sd3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random SD3 pipeline saved with save_pretrained (one per test module)."""
    from imgalign.trainers.testing import tiny_sd3_pipeline

    return tiny_sd3_pipeline(tmp_path_factory.mktemp("sd3"))


def _records_of(*names: str) -> Iterator[list[logging.LogRecord]]:
    """The records the loggers `names` handle while the test runs (the libraries' loggers do not propagate to the
    root logger, so caplog misses them, and their own handlers write to the stderr of when they were made)."""
    seen: list[logging.LogRecord] = []
    catch = logging.Handler()
    catch.emit = seen.append  # type: ignore[method-assign]
    loggers = [logging.getLogger(name) for name in names]
    for log in loggers:
        log.addHandler(catch)
    try:
        yield seen
    finally:
        for log in loggers:
            log.removeHandler(catch)


@pytest.fixture
def diffusers_save_log() -> Iterator[list[logging.LogRecord]]:
    """The records diffusers' pipeline module logs while the test runs (e.g. its warnings on save_pretrained)."""
    yield from _records_of("diffusers.pipelines.pipeline_utils")


@pytest.fixture
def library_log() -> Iterator[list[logging.LogRecord]]:
    """The records diffusers' and transformers' loggers handle while the test runs."""
    yield from _records_of("diffusers", "transformers")


@contextlib.contextmanager
def stdout_on_dev_full(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Inside the block, sys.stdout is unbuffered on /dev/full, which refuses every write with ENOSPC (``>
    /dev/full``); the test is skipped where the system has none. (A block in the test, not a fixture: pytest's
    capture puts its own stdout back when the test's call begins.)"""
    import io
    import sys

    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    full = io.TextIOWrapper(io.FileIO("/dev/full", "w"), encoding="utf-8", write_through=True)
    monkeypatch.setattr(sys, "stdout", full)
    try:
        yield full
    finally:
        full.buffer.close()


class SignalStandIn(Exception):
    """Raised by :func:`signal_stand_in`'s handler."""


def _raise_stand_in(signum: int, frame: object) -> None:
    raise SignalStandIn(signum)


@contextlib.contextmanager
def signal_stand_in(signum: int) -> Iterator[object]:
    """Inside the block, `signum`'s handler raises SignalStandIn: it stands in for the default (death), which would
    end pytest, so a test can check the program installs its own handler and puts this one back. Yields the
    handler."""
    import signal

    previous = signal.signal(signum, _raise_stand_in)
    try:
        yield _raise_stand_in
    finally:
        signal.signal(signum, previous)


@pytest.fixture
def two_prompts(tmp_path: Path) -> Path:
    """A GenEval .jsonl of the shapes suite's first two prompts."""
    from imgalign.prompts.io import load_geneval_metadata
    from imgalign.prompts.shapes import EVAL_SET_PATH

    p = tmp_path / "two.jsonl"
    p.write_text("".join(json.dumps(m) + "\n" for m in load_geneval_metadata(EVAL_SET_PATH)[:2]))
    return p


class _InlinePool:
    """A ProcessPoolExecutor stand-in: runs each job at submit time and records its worker count."""

    workers: list[int] = []

    def __init__(self, max_workers: int, mp_context: object = None) -> None:
        _InlinePool.workers.append(max_workers)

    def submit(self, fn, *a):
        import concurrent.futures

        f: concurrent.futures.Future = concurrent.futures.Future()
        f.set_result(fn(*a))
        return f

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


@pytest.fixture
def inline_pretrain_pool(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """`world pretrain` with its process pool run in this process and each component's pretraining replaced by a
    stand-in that returns ``{"progress": progress}``; the list gets the pool's worker count per pool started."""
    import concurrent.futures

    from imgalign.commands import world

    monkeypatch.setattr(_InlinePool, "workers", [])
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _InlinePool)
    monkeypatch.setattr(world, "_pretrain_one", lambda module, cfg, out, progress: {"progress": progress})
    return _InlinePool.workers


def metrics_run(folder: Path, rows: list[dict]) -> Path:
    """`folder` as a run folder whose metrics.jsonl holds `rows`."""
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture
def plot_calls(monkeypatch: pytest.MonkeyPatch) -> tuple[list, list]:
    """(drawn, titles): matplotlib's Axes.plot calls as (args, kwargs) and Axes.set_title's titles while the test
    runs (each still drawn)."""
    import matplotlib.axes

    drawn: list = []
    titles: list = []
    real_plot, real_title = matplotlib.axes.Axes.plot, matplotlib.axes.Axes.set_title
    monkeypatch.setattr(
        matplotlib.axes.Axes, "plot", lambda ax, *a, **k: (drawn.append((a, k)), real_plot(ax, *a, **k))[1]
    )
    monkeypatch.setattr(
        matplotlib.axes.Axes, "set_title", lambda ax, t, **k: (titles.append(t), real_title(ax, t, **k))[1]
    )
    return drawn, titles


class WordTokenizer:
    """A text tokenizer stand-in for the prompt-length checks of imgalign.sampling: one token per word plus start and
    end tokens, at most 77 (CLIP's); it knows the words of `vocab` (as ``WORD</w>``), which also tells two apart."""

    model_max_length = 77

    def __init__(self, vocab: tuple[str, ...] = ("w",)) -> None:
        self.vocab = {f"{w}</w>": i for i, w in enumerate(vocab)}
        self.deprecation_warnings: dict[str, object] = {}

    def get_vocab(self) -> dict[str, int]:
        return self.vocab

    def __call__(self, prompts: list[str], verbose: bool = False) -> dict[str, list[list[int]]]:
        return {"input_ids": [[0] * (len(p.split()) + 2) for p in prompts]}


class T5EncoderModel:
    """A text-encoder stand-in: imgalign.sampling reads only its class name (a T5 takes 512 tokens)."""


class CLIPTextModel:
    """A text-encoder stand-in: imgalign.sampling reads only its class name (a CLIP takes 77 tokens)."""


def plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Iterator[Path]:
    """For a fixture: the path of a plug-in module ``name.py`` importable from `tmp_path` for one test, with
    imgalign.config's record of user modules empty and no bytecode written; the module is forgotten after."""
    import sys

    from imgalign import config

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(config, "_USER_MODULES", {})
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    yield tmp_path / f"{name}.py"
    sys.modules.pop(name, None)


def write_later(path: Path, text: str, later_s: int) -> None:
    """Write `text` to `path`, its modification time `later_s` seconds on (an edit a person makes comes seconds after
    the last; Python's bytecode cache is keyed by seconds)."""
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + later_s * 1_000_000_000))


SQUARE_META = {
    "tag": "single_object",
    "include": [{"class": "square", "count": 1}],
    "prompt": "a photo of a square",
}
"""GenEval metadata of one single-object prompt."""


def square_layout(root: Path) -> Path:
    """A GenEval-layout folder `root` of one prompt (:data:`SQUARE_META`) with one black 8x8 sample."""
    from PIL import Image

    from imgalign.eval.suite import write_prompt_folder

    write_prompt_folder(root, 0, SQUARE_META, [Image.new("RGB", (8, 8))])
    return root


def strict_score_and_eval(gen: Path, tmp_path: Path) -> tuple[dict, float]:
    """GenEval-layout folder `gen` judged by `imgalign score --reward geneval:mode=strict` (its one image's scores)
    and by `imgalign eval --images` (the overall): the two commands read an image the same way."""
    from imgalign.cli import main

    out = tmp_path / "s.jsonl"
    argv = ["score", str(gen), "--reward", "geneval:mode=strict", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert main(["eval", "--images", str(gen), "--no-progress", "--out", str(tmp_path / "ev")]) == 0
    return json.loads(out.read_text())["scores"], json.loads((tmp_path / "ev" / "summary.json").read_text())[
        "overall"
    ]


def resume_stub(out: Path) -> Any:
    """A stand-in trainer for ``FlowGRPOTrainer._resolve_resume(stub, "auto")``: run folder `out`, the main and only
    process, no lock taken."""
    from types import SimpleNamespace

    return SimpleNamespace(
        out=out,
        is_main=True,
        acc=SimpleNamespace(wait_for_everyone=lambda: None),
        _lock_output_dir=lambda: None,
    )
