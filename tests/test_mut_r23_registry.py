"""trainers.registry edges that round 23's mutants left open."""

from __future__ import annotations

from imgalign.trainers.registry import Registry, call_problem


def test_a_builtin_without_a_signature_is_left_to_its_call(tmp_path, monkeypatch) -> None:
    """``max`` has no inspectable signature (inspect raises ValueError): nothing to check, so it is taken and its own
    call says what is wrong, not a ValueError traceback from inspect (R03)."""
    assert call_problem(max, 2) == ""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "r23_builtin_penalty.py").write_text("penalty = max\n")
    reg = Registry("velocity penalty", (), "velocity penalties", "penalty(v_theta, v_ref)")
    assert reg.get("r23_builtin_penalty:penalty") is max


def test_get_loads_the_builtin_modules_itself(tmp_path, monkeypatch) -> None:
    """A registry's built-ins are registered by importing its modules: get() imports them as names() does, so a
    built-in name is found in a process that imported nothing else (was found only after names() ran) (R08)."""
    import sys
    import types

    reg: Registry[int] = Registry("widget", ("r23_widgets",))
    holder = types.ModuleType("r23_holder")
    holder.REG = reg
    monkeypatch.setitem(sys.modules, "r23_holder", holder)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "r23_widgets", raising=False)
    (tmp_path / "r23_widgets.py").write_text("import r23_holder\n\nr23_holder.REG.register('gear')(7)\n")
    assert reg.get("gear") == 7
