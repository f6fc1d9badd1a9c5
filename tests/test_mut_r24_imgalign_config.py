"""Round 24 mutation survivors of imgalign/config.py: tests that pin the behaviour the surviving mutants changed."""

from __future__ import annotations

import dataclasses

import pytest

from imgalign.config import field


def test_a_missing_subpackage_named_in_the_users_own_path_gets_no_hint_that_its_package_imports_it(
    tmp_path, monkeypatch
):
    """reward 'pkg.nosuch.mod:fn' where pkg exists but has no nosuch/: the module path the user gave is wrong, so
    the error does not say that pkg.nosuch.mod "imports 'pkg.nosuch'" (it never ran), nor to pip install it."""
    from imgalign.config import import_user_module

    pkg = tmp_path / "cfgtest_r24_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError) as e:
        import_user_module("cfgtest_r24_pkg.nosuch.mod", "reward 'cfgtest_r24_pkg.nosuch.mod:fn'")
    text = str(e.value)
    assert text.startswith("cannot import reward 'cfgtest_r24_pkg.nosuch.mod:fn': No module named")
    assert "imports" not in text and "pip install" not in text


def test_a_user_module_with_a_syntax_error_names_its_full_path_and_line_once(tmp_path, monkeypatch):
    """A SyntaxError's own text names only the file's base name; the error names the whole path and the line of
    the user's file, once, and no imgalign file."""
    from imgalign.config import import_user_module

    (tmp_path / "cfgtest_r24_syntax.py").write_text("X = 1\n\ndef f(:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError) as e:
        import_user_module("cfgtest_r24_syntax", "reward 'cfgtest_r24_syntax:fn'")
    text = str(e.value)
    assert (
        f"raised SyntaxError: invalid syntax ({tmp_path / 'cfgtest_r24_syntax.py'}, line 3); fix that module"
        in text
    )
    assert "imgalign" not in text.replace("cfgtest", "")


def test_a_signed_exponent_number_in_a_config_file_is_an_integer_for_an_int_field(tmp_path) -> None:
    """YAML 1.1 reads -2e3 (no dot) as text; an int field takes it as -2000, as it takes 2e3 as 2000."""
    import dataclasses

    from imgalign.config import field, load_config

    @dataclasses.dataclass
    class Shift:
        up: int = field(0, help="an integer")
        down: int = field(0, help="an integer")

    path = tmp_path / "shift.yaml"
    path.write_text("up: +2e3\ndown: -2e3\n")
    assert load_config(Shift, path) == Shift(up=2000, down=-2000)


@dataclasses.dataclass
class _Inner:
    lr: float = field(1e-4, help="learning rate")


@dataclasses.dataclass
class _Outer:
    train: _Inner = field(default_factory=_Inner, help="training")
    name: str = field("run", help="run name")


def test_describe_lists_the_leaf_keys_of_a_section_not_the_section_itself() -> None:
    from imgalign.config import describe

    assert describe(_Outer) == [("train.lr", "0.0001", "learning rate"), ("name", "'run'", "run name")]


def test_a_quote_opening_an_item_keeps_its_commas() -> None:
    from imgalign.config import split_top_level

    assert split_top_level("'a, b',c") == ["'a, b'", "c"]
    assert split_top_level('x,"y, z"') == ["x", '"y, z"']


@dataclasses.dataclass
class _Rewards:
    names: list[str] = field(default_factory=list, help="reward specs", reward_specs=True)


def test_an_empty_list_for_a_section_gets_no_did_you_mean_its_spec_list() -> None:
    from imgalign.config import not_a_mapping

    assert not_a_mapping("rewards", _Rewards, []) == (
        "rewards: expected a mapping of _Rewards fields, got [] (its keys: names)"
    )
    assert not_a_mapping("rewards", _Rewards, ["clip"]).endswith(
        "; did you mean rewards.names: ['clip'] (a list inside the section)?"
    )


def test_text_with_a_colon_for_a_number_field_is_not_called_a_base_60_number() -> None:
    from imgalign.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(_Inner, None, ["lr=1:x"])
    assert "base-60" not in str(e.value) and str(e.value).startswith("lr: expected a number, got")
