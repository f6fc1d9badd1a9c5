"""Bad-input round 35h: a model folder (a saved pipeline or checkpoint given to eval/grid/score --model) edited by
hand between two commands."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from imgalign.pipelines import load_pipeline


def test_a_component_holding_another_components_weights_is_named_not_a_meta_tensor_traceback(
    sd3_dir: Path, tmp_path: Path
) -> None:
    """The VAE's weights file copied over the transformer's: diffusers loads the transformer with every tensor left
    on the meta device (it only logs the names), and `pipe.to(device)` failed with a NotImplementedError traceback,
    "Cannot copy out of meta tensor; no data!". It is now a one-line error naming the folder and what to do."""
    model = tmp_path / "model"
    shutil.copytree(sd3_dir, model)
    weights = "diffusion_pytorch_model.safetensors"
    shutil.copyfile(model / "vae" / weights, model / "transformer" / weights)
    with pytest.raises(ValueError) as e:
        load_pipeline(str(model))
    said = str(e.value)
    assert said.startswith(
        f"cannot load the pipeline {str(model)!r}: the weights in {model / 'transformer'} lack "
    )
    assert "of the transformer's tensors (e.g. " in said
    assert said.endswith(
        "a weights file of another component or model copied there? Restore the model's own transformer weights"
    )


def test_the_untouched_folder_still_loads(sd3_dir: Path) -> None:
    """The check refuses only tensors left unfilled: the folder as saved loads, every tensor on the CPU."""
    pipe = load_pipeline(str(sd3_dir))
    assert all(not p.is_meta for p in pipe.transformer.parameters())


@pytest.mark.parametrize(
    "edit",
    [
        lambda index: index.pop("vae"),  # a component removed
        lambda index: index.update(
            transformer=["diffusers", "FluxTransformer2DModel"]
        ),  # a class name changed
    ],
    ids=["component-removed", "class-changed"],
)
def test_an_edited_model_index_is_named_in_the_advice(sd3_dir: Path, tmp_path: Path, edit) -> None:
    """diffusers' error for a model_index.json edited by hand ("expected [...] but only {...} were passed", or a
    weight of another shape) ended with advice about "a config.json in it" only, sending the user to the component
    folders instead of the file that changed."""
    import json

    model = tmp_path / "model"
    shutil.copytree(sd3_dir, model)
    index = json.loads((model / "model_index.json").read_text())
    edit(index)
    (model / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError) as e:
        load_pipeline(str(model))
    assert str(e.value).startswith(f"cannot load the pipeline {str(model)!r}: ")
    assert str(e.value).endswith(
        "If its model_index.json or a config.json in it was edited by hand, compare them with the original model's"
    )
