"""imgalign.hub: what counts as a path, an environment variable and a weights file (mutation round 21)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign import hub


def test_an_existing_folder_is_a_path_whatever_its_slashes(tmp_path: Path, monkeypatch) -> None:
    """A folder in the working directory named like a Hub id (``org/model``) is what the libraries load: the user
    meant it as a path. The same name without the folder is a Hub id."""
    monkeypatch.chdir(tmp_path)
    assert not hub.looks_like_path("org/model")
    (tmp_path / "org" / "model").mkdir(parents=True)
    assert hub.looks_like_path("org/model")


def test_an_empty_brace_is_no_environment_variable() -> None:
    """``${}`` is no variable a shell would expand (it is a "bad substitution"): no hint about variables."""
    assert not hub.names_env_var("runs/${}/model") and hub.tilde_hint("runs/${}/model") == ""
    assert hub.names_env_var("runs/${R}/model")


def test_a_folder_named_like_a_weights_file_is_no_weights_file(tmp_path: Path) -> None:
    """Only files count: a folder ``model.safetensors`` (an unpacked archive, a mistaken copy) is neither weights
    nor a damaged weights file; a ``.safetensors`` path that does not exist is no damaged file either (the callers
    say it is missing)."""
    (tmp_path / "model.safetensors").mkdir()
    assert not hub.has_weight_files(tmp_path)
    assert hub.damaged_weights(tmp_path) == []
    hub.check_weights("M", tmp_path)
    assert hub.damaged_weights(tmp_path / "gone.safetensors") == []
    (tmp_path / "pytorch_model.bin").write_bytes(b"w")
    assert hub.has_weight_files(tmp_path)  # transformers' .bin weights count too


def test_a_safetensors_error_without_text_is_named_by_its_type(tmp_path: Path, monkeypatch) -> None:
    """A reason is never empty: an error with no message gives its type's name ("... no safetensors file ()" said
    nothing)."""
    import safetensors

    for error in (safetensors.SafetensorError(""), OSError(" ")):

        def refuse(*args, error: Exception = error, **kwargs):
            raise error

        monkeypatch.setattr(safetensors, "safe_open", refuse)
        assert hub.safetensors_error(tmp_path / "m.safetensors") == type(error).__name__


@pytest.mark.parametrize("kind", ["", "CLIPModel"])
def test_cannot_load_names_the_kind_of_folder_only_when_given(kind: str) -> None:
    said = hub.cannot_load("reward 'clip'", ValueError("bad config."), "org/model", kind=kind)
    want = f"Give a {kind} folder" if kind else "Give a folder"
    assert said.startswith("cannot load reward 'clip': bad config. ") and want in said


def test_an_invalid_config_error_without_a_name_is_named_by_its_type() -> None:
    """A KeyError with no key (no args) still gives one line: its type, not an IndexError from reading the key."""
    said = hub.invalid_config("M", KeyError())
    assert said.startswith("cannot load M: its config.json fails transformers' checks (KeyError);")
    assert "(transformers knows no 'gelu_x')" in hub.invalid_config("M", KeyError("gelu_x"))
