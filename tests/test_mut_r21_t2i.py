"""imgalign.pretrain.t2i: settings refused before any render or training step (mutation round 21)."""

from __future__ import annotations

import pytest

from imgalign.pretrain.t2i import Config, build_text_encoder


def test_an_odd_text_width_is_refused_before_the_autoencoder_stage(tmp_path) -> None:
    """Each text encoder has 2 attention heads: an odd width passed validation and failed only when the text
    encoders were built, after the renders and the whole autoencoder stage, with a transformers traceback."""
    from imgalign.pretrain.tokenizer import save_tokenizer

    with pytest.raises(ValueError, match=r"text_width must be even \(got 63\).*--set text_width=N"):
        Config(text_width=63).validate()
    cfg = Config(text_width=62)
    cfg.validate()
    tok = save_tokenizer(tmp_path / "tokenizer", cfg.max_length)
    assert build_text_encoder(cfg, tok, 1).config.hidden_size == 62


def test_a_whole_pipeline_that_also_holds_lora_weights_is_continued_not_refused_as_a_lora_checkpoint(
    tmp_path,
) -> None:
    """A folder is a LoRA checkpoint only without a model_index.json: a whole pipeline folder (a full fine-tune
    exported next to a LoRA file, say) is the pipeline it says it is."""
    import shutil

    from imgalign.hub import embedded_path
    from imgalign.pipelines import LORA_FILES, IncompleteModelError
    from imgalign.pretrain.t2i import init_folder

    folder = tmp_path / "ft"
    shutil.copytree(embedded_path("shapes"), folder)
    (folder / LORA_FILES[0]).write_bytes(b"w")
    assert init_folder(str(folder)) == folder
    (folder / "model_index.json").unlink()
    with pytest.raises(IncompleteModelError, match="a LoRA checkpoint"):
        init_folder(str(folder))
