"""Mutation round 28 (helper i): ``trainers.registry.Registry.register``: the decorator gives back what it registered,
the same module registering a name again replaces its own entry, and the built-ins are imported before a plug-in
registers, so a plug-in cannot take one of their names."""

from __future__ import annotations

import sys
import types

import pytest

from imgalign.trainers.registry import Registry


def test_the_decorator_gives_back_the_object_and_the_same_module_replaces_its_own() -> None:
    reg: Registry[object] = Registry("thing")

    def first() -> int:
        return 1

    def second() -> int:
        return 2

    assert reg.register("mine")(first) is first
    assert reg.register("mine")(second) is second
    assert reg.get("mine") is second


def test_a_plugin_cannot_take_a_built_in_name_before_the_built_ins_are_imported(
    tmp_path, monkeypatch
) -> None:
    builtin = "r28i_builtin_things"
    reg: Registry[object] = Registry("thing", builtin_modules=(builtin,))
    holder = types.ModuleType("r28i_registry_holder")
    holder.REG = reg
    monkeypatch.setitem(sys.modules, "r28i_registry_holder", holder)
    (tmp_path / f"{builtin}.py").write_text(
        "from r28i_registry_holder import REG\n\n@REG.register('plain')\ndef plain():\n    return 0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, builtin, raising=False)

    def plain() -> int:
        return 1

    try:
        with pytest.raises(
            ValueError, match=rf"^thing name 'plain' is already registered by {builtin}; register"
        ):
            reg.register("plain")(plain)
        assert reg.get("plain").__module__ == builtin
    finally:
        sys.modules.pop(builtin, None)
