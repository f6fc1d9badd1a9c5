"""Pretraining of the embedded shapes-world models (``imgalign world pretrain``).

Each component module exposes a ``Config`` dataclass (fields built with :func:`imgalign.config.field`) and
``pretrain(cfg, out_dir: Path, progress: bool = True) -> dict[str, float]``, which trains (resuming from
``out_dir`` when a checkpoint is there), writes the model folder in its library's own format plus a model card,
and returns its final metrics.
"""

COMPONENTS = {
    "t2i": "imgalign.pretrain.t2i",
    "clip": "imgalign.pretrain.clip",
    "vlm": "imgalign.pretrain.vlm",
}
