"""eval/reports.agg_pyplot, mutation round 32f survivors R01-R03: its MPLBACKEND message is given only for an
MPLBACKEND that matplotlib refuses as a backend, and it draws with Agg whatever backend was chosen before."""

from __future__ import annotations

import builtins
from typing import Any

import matplotlib
import pytest

from imgalign.eval.reports import agg_pyplot


def _matplotlib_import_fails(monkeypatch: pytest.MonkeyPatch, error: str) -> None:
    real = builtins.__import__

    def fake(name: str, *args: Any, **kw: Any) -> Any:
        if name == "matplotlib":
            raise ValueError(error)
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", fake)


def test_another_matplotlib_load_error_is_not_blamed_on_mplbackend(monkeypatch: pytest.MonkeyPatch) -> None:
    """(R01: the `"backend" not in str(e)` condition dropped) with a good MPLBACKEND set, a matplotlib that fails to
    load for another reason (a bad line of the user's matplotlibrc) keeps its own error."""
    monkeypatch.setenv("MPLBACKEND", "agg")
    _matplotlib_import_fails(monkeypatch, "Key lines.linewidth: Could not convert 'wide' to float")
    with pytest.raises(ValueError) as e:
        agg_pyplot()
    assert str(e.value) == "Key lines.linewidth: Could not convert 'wide' to float"


def test_a_bad_backend_without_mplbackend_keeps_matplotlibs_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """(R02: the `not backend` condition dropped) a bad backend from elsewhere (a matplotlibrc's backend line) with
    no MPLBACKEND set is not reported as "MPLBACKEND=None"."""
    monkeypatch.delenv("MPLBACKEND", raising=False)
    error = "Key backend: 'nosuch' is not a valid value for backend; supported values are ['agg']"
    _matplotlib_import_fails(monkeypatch, error)
    with pytest.raises(ValueError) as e:
        agg_pyplot()
    assert str(e.value) == error


def test_the_plots_draw_with_agg_whatever_backend_was_chosen_before() -> None:
    """(R03: `matplotlib.use("Agg")` dropped) a backend chosen before (a matplotlibrc's, or svg in the caller) is
    replaced by Agg, whose canvas the report's figures are read from (buffer_rgba)."""
    before = matplotlib.get_backend()
    try:
        matplotlib.use("svg")
        assert agg_pyplot().get_backend().lower() == "agg"
    finally:
        matplotlib.use(before)
