import logging
import os
from collections.abc import Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


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


@pytest.fixture
def diffusers_save_log() -> Iterator[list[logging.LogRecord]]:
    """The records diffusers' pipeline module logs while the test runs (e.g. its warnings on save_pretrained)."""
    seen: list[logging.LogRecord] = []
    catch = logging.Handler()
    catch.emit = seen.append  # type: ignore[method-assign]
    log = logging.getLogger("diffusers.pipelines.pipeline_utils")
    log.addHandler(catch)
    try:
        yield seen
    finally:
        log.removeHandler(catch)
