"""Mutation round 23b (stop 60): imgalign.hub's embedded-model folders and when the Hub counts as off."""

from __future__ import annotations

from pathlib import Path

import pytest

from imgalign import hub


def test_an_embedded_models_empty_folder_is_refused_by_name_with_how_to_get_it_back(
    tmp_path: Path, monkeypatch
) -> None:
    """A partial checkout leaves ``assets/models/shapes-clip`` present but empty: that is no model (the library
    would fail later naming no model); resolve and embedded_path say which model is missing and how to recreate it."""
    (tmp_path / "shapes-clip").mkdir()
    (tmp_path / "shapes-t2i").mkdir()
    (tmp_path / "shapes-t2i" / "model_index.json").write_text("{}")
    monkeypatch.setattr(hub, "ASSETS", tmp_path)
    with pytest.raises(
        hub.ModelNotFoundError, match=r"embedded model 'shapes-clip' is missing .*world pretrain"
    ):
        hub.resolve("shapes-clip")
    assert hub.resolve("shapes") == str(tmp_path / "shapes-t2i")
    assert hub.resolve("org/other") == "org/other"


@pytest.mark.parametrize("value", ["1", "on", "Yes", "TRUE"])
def test_the_hub_is_off_for_any_spelling_of_hf_hub_offline_read_now(monkeypatch, value: str) -> None:
    """HF_HUB_OFFLINE set after huggingface_hub loaded, in any case huggingface_hub itself accepts."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert hub.hub_offline()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert not hub.hub_offline()


def test_the_hub_is_off_when_huggingface_hub_read_it_at_import(monkeypatch) -> None:
    """HF_HUB_OFFLINE=1 when huggingface_hub loaded, unset since (a launcher that cleans the environment): still
    off, as the libraries still refuse to download."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert hub.hub_offline()
    reason = hub.load_error_reason(OSError("We couldn't connect to 'https://huggingface.co'."), "org/model")
    assert reason == "its files are not in the local Hub cache and HF_HUB_OFFLINE=1 stops downloads"


@pytest.mark.parametrize(
    ("spec", "is_path"),
    [
        ("gpt2", True),
        ("org/model", False),
        ("a/b/c", True),
        ("~/model", True),
        ("./model", True),
        ("/m", True),
    ],
)
def test_what_counts_as_a_path_and_what_as_a_hub_id(
    tmp_path: Path, monkeypatch, spec: str, is_path: bool
) -> None:
    """Only ``ORG/NAME`` is a Hub id: a bare name, two slashes, ``~/NAME`` (one slash, but a home folder) and
    dotted or absolute names are paths (here none exists)."""
    monkeypatch.chdir(tmp_path)
    assert hub.looks_like_path(spec) is is_path


def test_a_missing_bare_name_or_home_folder_says_no_such_folder_unless_the_hub_missed_it(
    tmp_path: Path, monkeypatch
) -> None:
    """A bare name that exists nowhere, with a library error that is no Hub miss, is a folder that is not there;
    ``~/model`` (no shell expanded it) is a missing folder with how to write it, whatever the library said."""
    monkeypatch.chdir(tmp_path)
    assert hub.load_error_reason(ValueError("Unrecognized model in gpt3"), "gpt3") == "no such folder"
    said = hub.load_error_reason(ValueError("Repo id must be in the form 'repo_name'"), "~/model")
    assert said.startswith("no such folder (a quoted ~ is not expanded: give the full path")
    hub_miss = OSError("We couldn't connect to 'https://huggingface.co' to load this file.")
    assert hub.load_error_reason(hub_miss, "gpt3").startswith("its files are not in the local Hub cache")
    # two slashes are no Hub id, whatever the library tried: the folder is missing
    assert hub.load_error_reason(hub_miss, "runs/exp/model") == "no such folder"


def test_an_existing_folder_that_fails_to_load_gives_the_librarys_reason_not_no_such_folder(
    tmp_path: Path,
) -> None:
    """The folder is there and its config is what the library refused: the reason is the library's own text. A
    folder with no config.json at all (a folder of images) says so: the library's line sent the user to edit a
    config.json that is not there."""
    (tmp_path / "model").mkdir()
    error = ValueError("Unrecognized model in model. Should have a `model_type` key in its config.json.")
    said = hub.load_error_reason(error, str(tmp_path / "model"))
    assert (
        said
        == "it has no config.json, so it holds no transformers model (one saved with save_pretrained has one)"
    )
    (tmp_path / "model" / "config.json").write_text('{"hidden_size": 8}')
    said = hub.load_error_reason(error, str(tmp_path / "model"))
    assert said == "Unrecognized model in model. Should have a `model_type` key in its config.json"


def test_an_invalid_config_gives_the_checks_own_reason_from_the_errors_cause() -> None:
    """huggingface_hub's StrictDataclassError says only which field failed; the reason (heads that do not divide
    the width) is its cause, which is what the line quotes."""
    try:
        try:
            raise ValueError("hidden_size 30 is not a multiple of num_attention_heads 4.\nmore")
        except ValueError as cause:
            raise RuntimeError("Validation error for field 'hidden_size'") from cause
    except RuntimeError as e:
        said = hub.invalid_config("the VLM", e)
    assert "(hidden_size 30 is not a multiple of num_attention_heads 4);" in said
    assert "Validation error" not in said
