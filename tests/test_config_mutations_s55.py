"""Tests from mutation round 18 (stop 55) of imgalign/config.py and trainers/config.py: each pins a behaviour a
hand-written mutant changed without any test failing."""

from dataclasses import dataclass

import pytest

from imgalign.config import ConfigError, field, load_config


@dataclass
class _Lists:
    names: tuple[str, ...] = field((), help="names, as a tuple")
    specs: list[str] = field(default_factory=list, help="reward specs", reward_specs=True)
    plain: list[str] = field(default_factory=list, help="plain strings")
    seed: int | None = field(None, help="an optional seed")


def test_a_set_list_of_strings_reads_its_items_as_a_config_files_list_does(tmp_path):
    """`--set` with a YAML list for a list of strings made each item str(item): a null item became the text 'None'
    and a mapping item the text of a dict, where the same list in a config file is refused naming the item; and a
    tuple field got a list. Both now read as the file does."""
    for sets in (["names=a,b"], ["names=[a, 12:30]"]):
        names = load_config(_Lists, None, sets).names
        assert isinstance(names, tuple) and names[0] == "a", sets
    assert load_config(_Lists, None, ["names=[a, 12:30]"]).names == ("a", "12:30")  # the text as typed
    with pytest.raises(ConfigError, match=r"plain\[1\] has no value .* remove the item"):
        load_config(_Lists, None, ["plain=[to_k, null]"])
    p = tmp_path / "c.yaml"
    for item in ("{a: 1, b: 2}", "{clip: 1, geneval: 2}"):
        with pytest.raises(ConfigError, match=r"specs\[0\]: expected a string, got \{"):
            load_config(_Lists, None, [f"specs=[{item}]"])
        p.write_text(f"specs:\n  - {item}\n")  # a file's multi-key mapping item: refused, not unpacked
        with pytest.raises(ConfigError, match=r"specs\[0\]: expected a string, got \{"):
            load_config(_Lists, p)
    # a one-key mapping item is a reward spec with its options, in both forms
    p.write_text("specs:\n  - geneval: mode=strict\n")
    assert load_config(_Lists, p).specs == ["geneval: mode=strict"]
    assert load_config(_Lists, None, ["specs=[geneval: mode=strict]"]).specs == ["geneval: mode=strict"]
