"""Mutation round 15: imgalign/hub.py's one-line errors (naming_pipeline, weights_do_not_fit) in detail."""

from __future__ import annotations

import pytest

from imgalign.hub import naming_pipeline, weights_do_not_fit

ADVICE = "If its model_index.json or a config.json in it was edited by hand, compare them with the original model's"


def test_naming_pipeline_counts_only_the_lines_that_say_something():
    """Blank lines of a library's message are neither shown nor counted among the lines left out; a message of two
    lines is shown whole, without an '(and 0 more lines)' note."""
    with pytest.raises(ValueError) as e, naming_pipeline("m"):
        raise RuntimeError("Error(s) in x:\n\n\tsize a\n  \n\tsize b.\n\n")
    assert (
        str(e.value)
        == f"cannot load the pipeline 'm': RuntimeError: Error(s) in x: size a (and 1 more lines; "
        f"-v shows them). {ADVICE}"
    )
    with pytest.raises(ValueError) as e, naming_pipeline("m"):
        raise TypeError("first\nsecond.")
    assert str(e.value) == f"cannot load the pipeline 'm': TypeError: first second. {ADVICE}"


def test_naming_pipeline_keeps_the_library_error_as_the_cause_for_v():
    """'-v shows them': the library's own exception stays the cause, so a verbose run's traceback holds every line."""
    error = ValueError("embed_dim must be divisible by 2")
    with pytest.raises(ValueError) as e, naming_pipeline("m"):
        raise error
    assert e.value.__cause__ is error


def test_weights_do_not_fit_quotes_the_first_line_unless_it_is_transformers_advice():
    """The first line of transformers' report is what did not fit; its advice to pass ignore_mismatched_sizes (a
    loader argument the user cannot pass) is not quoted, nor is an empty message."""
    tail = (
        "; transformers' load report above names the tensors. If config.json was edited or copied from another "
        "model, restore the model's own"
    )
    head = "cannot load M: its weights do not fit the shapes its config.json gives"
    error = RuntimeError(
        "Error(s) in loading state_dict for CLIPModel:\n\tsize mismatch for w.\n\tYou may consider "
        "adding `ignore_mismatched_sizes=True` in the model `from_pretrained` method."
    )
    assert weights_do_not_fit("M", error) == f"{head} (Error(s) in loading state_dict for CLIPModel:){tail}"
    advice = RuntimeError("You set `ignore_mismatched_sizes` to `False`, thus raising an error.\n\tsize w")
    assert weights_do_not_fit("M", advice) == head + tail
    assert weights_do_not_fit("M", RuntimeError("  ")) == head + tail


def _tensor_file(path):
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(path))
    return path


def test_check_weights_reads_the_folder_itself_names_the_first_damaged_file_and_safetensors_reason(tmp_path):
    """Only the folder's own *.safetensors are checked (a damaged file in a subfolder belongs to another model or
    a checkpoint); the first damaged file by name is reported with safetensors' own reason; a file given directly
    is checked only when it is a .safetensors file."""
    from imgalign.hub import check_weights, damaged_weights, safetensors_error

    folder = tmp_path / "m"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "x.safetensors").write_bytes(b"cut")
    good = _tensor_file(folder / "c.safetensors")
    assert damaged_weights(folder) == [] and safetensors_error(good) is None
    check_weights("M", folder)
    (folder / "b.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{")
    (folder / "a.safetensors").write_bytes(b"")
    why = safetensors_error(folder / "a.safetensors")
    assert why and why != "SafetensorError"  # safetensors' own text, not only the exception's name
    assert [f.name for f, _ in damaged_weights(folder)] == ["a.safetensors", "b.safetensors"]
    with pytest.raises(ValueError) as e:
        check_weights("M", folder)
    assert str(e.value) == (
        f"cannot load M: its weights file {str(folder / 'a.safetensors')!r} is damaged, cut short by a copy or "
        f"download or no safetensors file ({why}); copy, download or save the model again"
    )
    (tmp_path / "model.bin").write_bytes(b"not a safetensors file")
    assert damaged_weights(tmp_path / "model.bin") == []
    assert [f for f, _ in damaged_weights(folder / "b.safetensors")] == [folder / "b.safetensors"]
