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

import contextlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
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


HUB_MISS_MARKERS = (
    "couldn't connect to",
    "cannot find the requested files in the local cache",
    "failed to download",
    "outgoing traffic has been disabled",
)
"""Phrases of transformers', diffusers' and open_clip's errors for files neither in the Hub cache nor downloadable."""


def hub_offline() -> bool:
    """Whether the Hub may not be contacted (``HF_HUB_OFFLINE`` set, read now or when huggingface_hub loaded)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").upper() in (
        "1",
        "ON",
        "YES",
        "TRUE",
    )


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
"""The environment variables through which the Hub's HTTP client finds a proxy."""


def _raised_as(error: BaseException, *class_names: str) -> bool:
    """Whether `error` is one of the HTTP client's classes `class_names` (or a subclass), matched by name: httpx and
    requests are imported only where the Hub is contacted."""
    return any(c.__name__ in class_names for c in type(error).__mro__)


def _first_line(error: BaseException) -> str:
    """The first non-blank line of `error`'s text, or its class name where it has none."""
    return next((ln.strip() for ln in str(error).splitlines() if ln.strip()), type(error).__name__)


def proxy_failure(error: BaseException) -> str | None:
    """The one-line error for a Hub request that a proxy refused (huggingface_hub raises its HTTP client's
    ProxyError as it is, where a connection that fails falls back to the local cache), or None for another error.
    A proxy that answered an error (a 404, a 407 asking for a login) gave a traceback, even for a model already in
    the cache. The variables are named, not their values, which may hold a password."""
    if not _raised_as(error, "ProxyError"):
        return None
    names = [v for v in PROXY_VARIABLES if os.environ.get(v)]
    via = f" set in {', '.join(names)}" if names else ""
    said = _first_line(error)
    return (
        f"the Hugging Face Hub could not be reached through the proxy{via} ({said}); fix the proxy's address or "
        "login, unset the proxy variables, or set HF_HUB_OFFLINE=1 to use only models already downloaded"
    )


def hub_address_failure(error: BaseException) -> str | None:
    """The one-line error for a Hub request to an address that is no URL (``HF_ENDPOINT=hf-mirror.com``, without
    ``https://``: a mirror's address mistyped), or None for another error. It gave an httpx UnsupportedProtocol
    traceback, even for a model already in the cache."""
    if not _raised_as(error, "UnsupportedProtocol", "InvalidURL"):
        return None
    endpoint = os.environ.get("HF_ENDPOINT")
    said = _first_line(error)
    where = f"HF_ENDPOINT={endpoint!r}" if endpoint else "the address of the Hugging Face Hub"
    return (
        f"{where} is not a URL the Hub can be asked at ({said}); give it as https://HOST (or unset HF_ENDPOINT), "
        "or set HF_HUB_OFFLINE=1 to use only models already downloaded"
    )


def model_index_file(name_or_path: str | Path) -> Path:
    """The ``model_index.json`` diffusers reads for a pipeline: a folder's, or for a Hub id that is no local path,
    its copy in the local Hugging Face cache, downloaded there first (that one small file) unless the Hub may not be
    contacted. Where neither exists, the folder's path (which does not exist)."""
    index = Path(name_or_path) / "model_index.json"
    if index.is_file() or looks_like_path(str(name_or_path)):
        return index
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(str(name_or_path), "model_index.json")
    except ValueError:  # not spelt as a Hub id
        return index
    if isinstance(cached, str):
        return Path(cached)
    if hub_offline():
        return index
    # online, a Hub id not yet downloaded (examples/sd35m's model.path on a new machine) was refused as "not in the
    # local cache" before the loader, which would have downloaded it, ran; a failed download is left to that message
    try:
        return Path(hf_hub_download(str(name_or_path), "model_index.json"))
    except Exception:  # noqa: BLE001 - gated, missing, no network, a proxy: the caller names the id and what to do
        return index


def looks_like_path(spec: str) -> bool:
    """A model name meant as a local path rather than a Hub id (``ORG/NAME``): absolute, relative with a dot,
    starting with ``~``, existing, or with other than one slash."""
    p = Path(spec)
    return p.is_absolute() or spec.startswith((".", "~")) or p.exists() or spec.count("/") != 1


@contextlib.contextmanager
def dropping_root_records(drop: Callable[[logging.LogRecord], bool]) -> Iterator[None]:
    """While the block runs, the root logger (where open_clip logs) drops the records `drop` selects."""

    def keep(record: logging.LogRecord) -> bool:
        return not drop(record)

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def quiet_open_clip_errors() -> contextlib.AbstractContextManager[None]:
    """While an open_clip model loads: drop the ERROR lines open_clip logs on the root logger just before it
    raises the same failure ("Failed to download weights ..."), which the caller turns into one line of its own."""
    return dropping_root_records(
        lambda r: r.levelno >= logging.ERROR and f"{os.sep}open_clip{os.sep}" in r.pathname
    )


def tilde_hint(spec: str) -> str:
    """For a name starting with ``~`` or holding an environment variable (``$HOME/x``, ``${RUNS}/x``; quoted, or
    in a YAML config, so no shell expanded it), or a Windows path (``data\\p.txt``) whose '/' spelling exists: the
    libraries read it as it is, so say how to write it; "" for any other name."""
    if spec.startswith("~"):
        try:
            full = str(Path(spec).expanduser())
        except RuntimeError:  # ~USER of a user this system does not know: no home folder to name
            return " (a quoted ~ is not expanded: give the full path)"
        return f" (a quoted ~ is not expanded: give the full path, {full!r})"
    posix = spec.replace("\\", "/")
    if posix != spec and Path(posix).exists():  # a path copied from Windows
        return (
            " (a Windows path: here '\\' is part of a name, not a folder separator; write '/' between folders, "
            f"{posix!r})"
        )
    if not names_env_var(spec):
        return ""
    full = os.path.expandvars(spec)
    example = f", {full!r}" if full != spec else ""
    return f" (environment variables such as $HOME are not expanded: give the full path{example})"


def names_env_var(spec: str) -> bool:
    """Whether `spec` holds ``$NAME`` or ``${NAME}``, an environment variable only a shell expands."""
    return re.search(r"\$(\{\w+\}|[A-Za-z_]\w*)", spec) is not None


def load_error_reason(error: BaseException, spec: str | None = None) -> str:
    """Why a model did not load, in one line for an error message. `spec`, the name the user gave, when it may
    be a local folder: a path that does not exist says so. A Hub id missing from the cache says that (and that the
    Hub is off when it is) instead of the libraries' several lines about connections; anything else is the
    library's own text. A bare name (``gpt2``) is a folder or a legacy Hub id: the library's error tells which."""
    text = str(error).strip()
    hub_miss = any(m in text.lower() for m in HUB_MISS_MARKERS)
    # its first line: an unknown model_type got transformers' paragraphs of upgrade advice after it
    text = next((ln.strip() for ln in text.splitlines() if ln.strip()), "").rstrip(".")
    # as the library reads it: '~/DIR' is no folder even where the home folder holds DIR
    if spec is not None and looks_like_path(spec) and not Path(spec).exists():
        bare = "/" not in spec and not spec.startswith((".", "~"))
        if not (bare and hub_miss):
            return "no such folder" + tilde_hint(spec)
    if hub_miss:
        why = "HF_HUB_OFFLINE=1 stops downloads" if hub_offline() else "the Hub could not be reached"
        return f"its files are not in the local Hub cache and {why}"
    if spec is not None and text.startswith("Unrecognized model in") and Path(spec).is_dir():
        return _not_transformers_folder(Path(spec)) or text
    return text


def _not_transformers_folder(folder: Path) -> str:
    """What an existing `folder` holds instead of a transformers model, or "" when that is not known. transformers
    said "Should have a `model_type` key in its config.json" of a diffusers pipeline or an open_clip model (no
    config.json) and of one part of a pipeline, as if the fix were an edit of that file."""
    config = folder / "config.json"
    if config.is_file():
        try:
            cfg = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return ""
        if isinstance(cfg, dict) and cfg.get("_class_name") and not cfg.get("model_type"):
            return f"it holds a diffusers {cfg['_class_name']} (one part of a pipeline), not a transformers model"
        return ""
    if (folder / "model_index.json").is_file():
        return "it holds a diffusers pipeline (model_index.json), not a transformers model"
    if (folder / "open_clip_config.json").is_file():
        return "it holds an open_clip model (open_clip_config.json), not a transformers model"
    # (a folder of images, or a download cut short): the library's line sent the user to edit a file not there
    return "it has no config.json, so it holds no transformers model (one saved with save_pretrained has one)"


def cannot_load(what: str, error: BaseException, spec: str, kind: str = "") -> str:
    """``cannot load WHAT: REASON. Give a [KIND ]folder saved with save_pretrained or a Hub id already downloaded
    (...)``: the one-line error for a transformers model that did not load (:func:`load_error_reason`)."""
    return (
        f"cannot load {what}: {load_error_reason(error, spec)}. Give a {kind + ' ' if kind else ''}folder saved with "
        "save_pretrained or a Hub id already downloaded (the Hub is not contacted when HF_HUB_OFFLINE=1)"
    )


@contextlib.contextmanager
def naming_pipeline(path: str | Path) -> Iterator[None]:
    """Errors a library raises while it builds a pipeline from folder `path`, as one ValueError naming the folder.
    A hand-edited or damaged ``config.json`` (``"num_layers": "two"``, an attention size that does not divide)
    made diffusers fail with a TypeError traceback or a bare line such as "embed_dim must be divisible by 2", and
    weights of other shapes than the config with a RuntimeError of many lines; none named the folder. The advice
    names model_index.json too: a component removed from it, or its class name changed, fails here as well."""
    try:
        yield
    except (TypeError, ValueError, RuntimeError) as e:
        # (diffusers' advice on a weight of another shape, to pass loader arguments, is not the user's to follow)
        said = str(e).split(" If you want to instead overwrite randomly initialized weights")[0]
        lines = [ln.strip() for ln in said.strip().splitlines() if ln.strip()]
        text = " ".join(lines[:2]).rstrip(".") + (
            f" (and {len(lines) - 2} more lines; -v shows them)" if len(lines) > 2 else ""
        )
        raise ValueError(
            f"cannot load the pipeline {str(path)!r}: {type(e).__name__}: {text}. If its model_index.json or a "
            "config.json in it was edited by hand, compare them with the original model's"
        ) from e


def weights_do_not_fit(what: str, error: BaseException) -> str:
    """The error line for a model whose weights have other shapes than its config.json gives (an edited or swapped
    config): transformers raised a RuntimeError advising a loader argument the user cannot pass."""
    said = str(error).strip().splitlines()[0] if str(error).strip() else ""
    why = "" if not said or "ignore_mismatched_sizes" in said else f" ({said})"
    return (
        f"cannot load {what}: its weights do not fit the shapes its config.json gives{why}; transformers' load "
        "report above names the tensors. If config.json was edited or copied from another model, restore the "
        "model's own"
    )


WEIGHT_SUFFIXES = (".safetensors", ".bin")
"""Suffixes of the weights files the libraries' loaders (diffusers, transformers, open_clip) read from a folder."""


def has_weight_files(folder: str | Path, suffixes: tuple[str, ...] = WEIGHT_SUFFIXES) -> bool:
    """Whether model folder `folder` holds a weights file (one of `suffixes`; not its subfolders). A folder with a
    config but no weights loads with random weights or fails after the other components loaded; the callers refuse
    it first by name. False for a path that is no folder."""
    folder = Path(folder)
    return folder.is_dir() and any(f.suffix in suffixes and f.is_file() for f in folder.iterdir())


def damaged_weights(path: str | Path) -> list[tuple[Path, str]]:
    """(file, safetensors' reason) for each ``*.safetensors`` file in model folder `path` (not its subfolders), or
    for `path` itself when it is such a file, whose header safetensors refuses: a copy or download cut short, an
    empty file, or one that is no safetensors file. No tensor is read. Empty for anything else (a Hub id: the
    library checks its cache)."""
    path = Path(path)
    files = (
        sorted(path.glob("*.safetensors"))
        if path.is_dir()
        else [path]
        if path.suffix == ".safetensors"
        else []
    )
    found = [(f, safetensors_error(f)) for f in files if f.is_file()]
    return [(f, why) for f, why in found if why is not None]


def safetensors_error(file: str | Path) -> str | None:
    """Why safetensors refuses the header of `file` (cut short, empty, of another size than its header gives, or
    no safetensors file), or None when it opens. No tensor is read."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="pt"):
            return None
    except (OSError, SafetensorError) as e:
        return str(e).strip() or type(e).__name__


def check_weights(what: str, path: str | Path) -> None:
    """Raise a ValueError naming `what` and the file when a weights file of model folder (or file) `path` is damaged
    (:func:`damaged_weights`): the libraries' loaders failed with a SafetensorError traceback naming no file."""
    bad = damaged_weights(path)
    if bad:
        file, why = bad[0]
        raise ValueError(
            f"cannot load {what}: its weights file {str(file)!r} is damaged, cut short by a copy or download or no "
            f"safetensors file ({why}); copy, download or save the model again"
        )


def invalid_config_errors() -> tuple[type[Exception], ...]:
    """What transformers raises for a ``config.json`` that fails its own checks: huggingface_hub's
    StrictDataclassError (an attention head count that does not divide the width; no ValueError, and absent from
    older huggingface_hub) and a KeyError (a ``hidden_act`` it does not know)."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:
        return (KeyError,)
    return (KeyError, StrictDataclassError)


def invalid_config(what: str, error: BaseException) -> str:
    """The error line for a model whose ``config.json`` fails transformers' checks (:func:`invalid_config_errors`),
    with the check's own reason (the error's cause)."""
    cause = error.__cause__ or error
    if isinstance(error, KeyError) and error.args:  # an activation or other name the library does not know
        said = f"transformers knows no {error.args[0]!r}"
    else:
        said = str(cause).strip().splitlines()[0].rstrip(".") if str(cause).strip() else type(cause).__name__
    return (
        f"cannot load {what}: its config.json fails transformers' checks ({said}); if config.json was edited or "
        "copied from another model, restore the model's own"
    )
