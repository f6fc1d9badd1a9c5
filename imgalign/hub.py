"""Names for the embedded default models shipped in ``imgalign/assets/models`` and their resolution to folders.

=================  ==============================================================  ==============================
name               what                                                            loads with
=================  ==============================================================  ==============================
``shapes``         the tiny SD3-architecture text-to-image pipeline                ``StableDiffusion3Pipeline``
``shapes-clip``    the open_clip CLIP trained contrastively on shapes captions      ``open_clip``
``shapes-vlm``     the captioning VLM (transformers image-text-to-text)            ``AutoModelForImageTextToText``
``shapes-artifact``  the artifact classifier head for the shapes world            ``imgalign.rewards``
=================  ==============================================================  ==============================

Anything that is not one of these names is taken as a local folder or a Hub id and left to the library's loader.
"""

from __future__ import annotations

from pathlib import Path

ASSETS = Path(__file__).parent / "assets" / "models"
EMBEDDED = {
    "shapes": "shapes-t2i",
    "shapes-t2i": "shapes-t2i",
    "shapes-clip": "shapes-clip",
    "shapes-vlm": "shapes-vlm",
    "shapes-artifact": "shapes-artifact",
}


class ModelNotFoundError(FileNotFoundError):
    """A model name or path that resolves to nothing usable."""


def embedded_path(name: str) -> Path:
    """The folder of an embedded model; raise if its files are missing (e.g. a partial checkout)."""
    if name not in EMBEDDED:
        raise ModelNotFoundError(
            f"{name!r} is not an embedded model; embedded models: {', '.join(sorted(EMBEDDED))}"
        )
    path = ASSETS / EMBEDDED[name]
    if not path.is_dir() or not any(path.iterdir()):
        raise ModelNotFoundError(
            f"embedded model {name!r} is missing from {path}; reinstall imgalign or recreate it with "
            "`imgalign world pretrain`"
        )
    return path


def resolve(name_or_path: str | Path) -> str:
    """Embedded name -> its folder; an existing local path -> itself; anything else is returned unchanged
    (a Hub id, for the library's own loader to resolve, offline or not)."""
    s = str(name_or_path)
    if s in EMBEDDED:
        return str(embedded_path(s))
    return s
