"""Bad-input round 30c: a Hub id that is neither cached nor reachable (HF_HUB_OFFLINE unset, no network)."""

from __future__ import annotations

import pytest

from imgalign import pipelines

# what diffusers 0.3x raises (an OSError) for an id it can neither find in the cache nor fetch
DIFFUSERS_SAID = (
    "Cannot load model someorg/somemodel: the model is not fully cached locally (Cannot find an appropriate cached "
    "snapshot folder for the specified revision on the local disk and outgoing traffic has been disabled. To enable "
    "repo look-ups and downloads online, pass 'local_files_only=False' as input.) and an error occurred while trying "
    "to fetch metadata from the Hub. Please check out the root cause in the stacktrace above."
)


def test_an_unreachable_hub_id_names_the_model_and_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without HF_HUB_OFFLINE and without a network, `--model someorg/somemodel` passed diffusers' OSError through:
    it pointed to "the stacktrace above" (none is shown) and to `local_files_only=False`, a loader argument no
    command takes. The error now names the model and its label and says to check the spelling and the network,
    download it once, or give a folder; the library's own reason stays, without those two pointers."""
    from diffusers import DiffusionPipeline

    def unreachable(*args: object, **kwargs: object) -> None:
        raise OSError(DIFFUSERS_SAID)

    monkeypatch.setattr(
        pipelines, "hub_id_available", lambda repo_id: True
    )  # as when HF_HUB_OFFLINE is unset
    monkeypatch.setattr(DiffusionPipeline, "from_pretrained", unreachable)
    with pytest.raises(pipelines.IncompleteModelError) as info:
        pipelines.load_pipeline(pipelines.ModelSpec("mine", "someorg/somemodel"))
    said = str(info.value)
    assert said.startswith(
        "model 'mine': 'someorg/somemodel' is no local folder, and the Hub id could not be loaded"
    )
    assert "the model is not fully cached locally" in said
    assert "download it once (hf download someorg/somemodel), or give the folder it was saved to" in said
    assert "stacktrace above" not in said
    assert "local_files_only" not in said


def test_an_os_error_from_a_local_folder_is_not_called_a_hub_id(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OSError while loading a local pipeline folder is not rewritten as a Hub failure."""
    from pathlib import Path

    from diffusers import DiffusionPipeline

    folder = Path(str(tmp_path))

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk read error")

    monkeypatch.setattr(pipelines, "check_model_spec", lambda spec: spec)
    monkeypatch.setattr(DiffusionPipeline, "from_pretrained", broken)
    with pytest.raises(OSError, match="^disk read error$"):
        pipelines.load_pipeline(pipelines.ModelSpec("local", str(folder)))
