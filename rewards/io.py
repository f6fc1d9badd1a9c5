"""Image files for rewards: find them (files, folders, globs), open them safely, load a folder as a batch."""

from __future__ import annotations

import contextlib
import errno
import glob
import logging
import os
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from imgalign.rewards.base import pil_to_rgb

log = logging.getLogger(__name__)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".avif")
"""Files read as images in folders (Pillow opens AVIF from 11.3 on when built with it, as the wheels are)."""


class ImageReadError(ValueError):
    """An image file that cannot be decoded; the message names the file and the problem."""


def find_images(paths: Iterable[str | Path]) -> list[Path]:
    """Expand files, folders (recursively, image suffixes only) and globs into a sorted, de-duplicated list.
    Explicitly named files are kept whatever their suffix (so a broken one gets an error row, not silence). A
    glob (quoted, so the shell left it alone) expands as the shell would, to files and folders alike; one that
    matches nothing is an error, as is a path that does not exist or is empty. A folder's hidden files and folders
    (macOS's ``._a.png`` and ``.DS_Store``, ``.git``) are skipped, as ``ls`` and a shell glob skip them; its
    symlinked subfolders are followed (each real folder once, so a link loop ends)."""

    def expand(path: Path) -> list[Path]:
        if not path.is_dir():
            return [path] if path.is_file() else []
        found: list[Path] = []
        dangling: list[Path] = []
        seen_dirs = set()
        for root, dirs, names in os.walk(path, followlinks=True):
            st = os.stat(root)
            if (st.st_dev, st.st_ino) in seen_dirs:
                dirs[:] = []
                continue
            seen_dirs.add((st.st_dev, st.st_ino))
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            named = [
                Path(root) / n
                for n in names
                if not n.startswith(".") and Path(n).suffix.lower() in IMAGE_SUFFIXES
            ]
            found += [f for f in named if f.is_file()]
            dangling += [f for f in named if f.is_symlink() and not f.exists()]
        _warn_of_dangling_links(path, dangling)
        return sorted(found)

    out: list[Path] = []
    for p in paths:
        s = str(p)
        if not s.strip():  # Path('') is the current folder: "$DIR" with DIR unset read every image under it
            raise FileNotFoundError(
                "an empty path ('', an unset shell variable?) names no file or folder: give the images' folder"
            )
        path = Path(s)
        pattern = any(ch in s for ch in "*?[")
        if path.is_dir() or path.is_file():
            out += expand(path)
        elif pattern and (matches := sorted(glob.glob(s, recursive=True))):
            for q in matches:
                out += expand(Path(q))
        # a pattern that matches nothing is the name of a broken link where one is there (as a shell passes it on):
        # `score 'shot[1].png'`, a link to an unmounted disk, said "matches no file or folder; check the pattern"
        elif pattern and not path.is_symlink():
            raise FileNotFoundError(f"{s!r} matches no file or folder; check the pattern")
        elif path.is_symlink() and not path.exists():  # `ls` shows it: "is not a file" read as a wrong name
            # (a link to a FIFO or a device exists: it is "not a file", not a link to nothing)
            # a loop has no target to restore: it said "restore its target" of one too
            why, fix = (
                ("leads back to itself (a loop of links)", "point it at the image file")
                if _loops(path)
                else ("does not exist", "restore its target")
            )
            raise FileNotFoundError(
                f"{s!r} is a symlink to {os.readlink(path)!r}, which {why}: {fix}, or give the image file itself"
            )
        else:
            raise FileNotFoundError(f"{s!r} is not a file, folder or glob that matches anything")
    # one file spelt two ways (a/x.png, /abs/a/x.png, a/b/../x.png) was scored twice and counted twice in the means;
    # its folder is resolved, not the file: a symlink to another image (one image in two prompt folders) stays
    seen: set[Path] = set()
    uniq = []
    for p in out:
        key = p.parent.resolve() / p.name
        if key not in seen:
            seen.add(key)
            uniq.append(p)
    return uniq


_DANGLING_WARNED: set[tuple[Path, ...]] = set()
"""The sets of dangling links already named: a command walks its folder more than once (counted, then read)."""


def forget_notices() -> None:
    """Forget the dangling links already named, so that the next command names them again
    (:func:`imgalign.cli.main` calls this at the start of each call: a process may run several commands)."""
    _DANGLING_WARNED.clear()


def _warn_of_dangling_links(folder: Path, links: Sequence[Path]) -> None:
    """Name the image-named symlinks under `folder` whose target is gone (a dataset of links on a disk that is not
    mounted, or moved), once per command: they are no image file, so a folder walk leaves them out, but without a
    word the folder read as fewer images, or as "0 readable images", with no hint why."""
    key = tuple(sorted(p.absolute() for p in links))
    if links and key not in _DANGLING_WARNED:
        _DANGLING_WARNED.add(key)
        # a link that leads back to itself (a.png -> b.png -> a.png) was said to have a target that does not
        # exist, beside its target in the same folder
        loops = sorted(p for p in links if _loops(p))
        gone = sorted(p for p in links if p not in loops)
        if gone:
            log.warning(
                "skipped %d symlink(s) under %s whose target does not exist, e.g. %s -> %s: restore or mount "
                "their targets, or remove the links",
                len(gone),
                folder,
                gone[0],
                os.readlink(gone[0]),
            )
        if loops:
            log.warning(
                "skipped %d symlink(s) under %s that lead back to themselves (a loop of links), e.g. %s -> %s: "
                "point them at the image files, or remove the links",
                len(loops),
                folder,
                loops[0],
                os.readlink(loops[0]),
            )


def _loops(link: Path) -> bool:
    """Whether following `link` comes back to a link already followed (ELOOP)."""
    try:
        os.stat(link)
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


ORIENTATION_TAG = 0x0112  # EXIF Orientation: 1 upright; 5 to 8 a quarter turn (transposed or not)


def upright(im: Image.Image) -> Image.Image:
    """`im` turned as its EXIF orientation tag says a viewer shows it: a phone's portrait photo is stored sideways with
    such a tag, and was scored and judged sideways ("left of" read as "above")."""
    return ImageOps.exif_transpose(im)


def upright_size(im: Image.Image) -> tuple[int, int]:
    """The (width, height) :func:`upright` gives `im`, from its header: a quarter turn swaps them."""
    turned = im.getexif().get(ORIENTATION_TAG) in (5, 6, 7, 8)
    return (im.height, im.width) if turned else im.size


def open_image(path: str | Path, shown: str | Path | None = None) -> Image.Image:
    """``Image.open(path)``, with PIL's DecompressionBombWarning (an image of about 89 to 179 million pixels, which
    is read) as a warning that names the file: PIL's own, "Image size (100000000 pixels) exceeds limit of 89478485
    pixels, could be decompression bomb DOS attack.", named no file, and a run of 4.7 GB for one scan said nothing
    of which one. `shown`: the file to name, where `path` is a copy of it."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            return Image.open(path)
        except Image.DecompressionBombWarning:
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        im = Image.open(path)
    log.warning(
        "%s is %dx%d pixels, over PIL's limit of %d for an image it reads without a warning: it is read whole, "
        "which takes several GB of memory; downscale it if that is more than it needs",
        path if shown is None else shown,
        im.width,
        im.height,
        Image.MAX_IMAGE_PIXELS,
    )
    return im


def decoded_rgb(im: Image.Image, shown: str | Path | None, verb: str = "read") -> Image.Image:
    """Opened image `im` decoded whole (truncation surfaces here), turned upright and made 8-bit RGB
    (:func:`~imgalign.rewards.base.pil_to_rgb`), with a warning naming `shown` (None: no warning) that only the
    first frame of an animated GIF or WebP, an APNG or a multi-page TIFF is `verb` (the other frames were left out
    without a word)."""
    im.load()
    frames = getattr(im, "n_frames", 1)
    if shown is not None and frames > 1:
        log.warning(
            "%s holds %d frames; only the first is %s (save the frame you mean as its own image)",
            shown,
            frames,
            verb,
        )
    return pil_to_rgb(upright(im))


MAX_ASPECT = 100
"""The most elongated image ``imgalign score`` reads (long side / short side; :func:`read_image`'s `max_aspect`): the
rewards resize an image's short side to their input size first (CLIP's shortest-edge resize), so a 60000x1 image (a
PNG of 256 bytes) took 3.7 GB in ``imgalign score --reward clip``, while the artifact reward refused it. (The folder
loaders below resize every image to one size first, which such an image does not blow up.)"""


def read_image(path: str | Path, max_aspect: int | None = None) -> Image.Image:
    """Decode an image fully (truncation surfaces here) and convert any mode to 8-bit RGB.
    Raises :class:`ImageReadError` naming the file for empty, truncated, corrupt or non-image files, and, before
    decoding it, for an image more elongated than `max_aspect` (long side / short side) where one is given."""
    path = Path(path)
    try:
        if path.stat().st_size == 0:
            raise ImageReadError(f"{path}: empty file (0 bytes)")
        with open_image(path) as im:
            w, h = im.size
            if max_aspect is not None and max(w, h) > max_aspect * max(min(w, h), 1):
                raise ImageReadError(
                    f"{path}: {w}x{h} pixels, over {max_aspect}:1 between its sides; the rewards resize the short "
                    "side to their input size first, so such an image takes memory out of all proportion to it (a "
                    f"60000x1 PNG took 3.7 GB): crop it (or pad it) to at most {max_aspect}:1"
                )
            return decoded_rgb(im, path)
    except UnidentifiedImageError:
        hint = ""
        # an AVIF photo on a Pillow built without it read as "not an image"
        if path.suffix.lower() == ".avif":
            from PIL import features

            if not features.check("avif"):
                hint = "; this Pillow is built without AVIF: install Pillow's wheels (pip install -U pillow)"
        raise ImageReadError(f"{path}: not an image (PIL cannot identify the format){hint}") from None
    except Image.DecompressionBombError as e:  # not an OSError: it stopped the whole run with a traceback
        raise ImageReadError(f"{path}: too large to decode ({e}); downscale it") from None
    except (OSError, SyntaxError, ValueError) as e:
        if isinstance(e, ImageReadError):
            raise
        raise ImageReadError(f"{path}: cannot decode image ({e})") from None


def common_size(sizes: Counter[tuple[int, int]]) -> tuple[int, int]:
    """The (width, height) most images have (ties: the first counted), warning when others differ: they are resized
    to it (not to the first image's size: a 1x1 thumbnail or a 6000x6000 photo that sorts first would shrink, or
    blow up, every other image)."""
    target = sizes.most_common(1)[0][0]
    if len(sizes) > 1:
        total = sum(sizes.values())
        log.warning(
            "%d of %d images are not %dx%d and were resized to it (bicubic)",
            total - sizes[target],
            total,
            *target,
        )
    return target


def _as_size(size: int | tuple[int, int] | None) -> tuple[int, int] | None:
    """`size` (a side, or (width, height)) as (width, height), None for None; a side below 1 is refused by name
    (size 0 was PIL's bare 'height and width must be > 0', or a folder's own size when given as (0, 0))."""
    if size is None:
        return None
    target = (size, size) if isinstance(size, int) else tuple(size)
    if len(target) != 2 or min(target) < 1:
        raise ValueError(f"an image size must be a side or (width, height) of at least 1 pixel, got {size!r}")
    return target  # type: ignore[return-value]


def pil_batch(images: list[Image.Image], size: int | tuple[int, int] | None = None) -> torch.Tensor:
    """RGB PIL images -> float32 [B, 3, H, W] in [0, 1]; resized (bicubic) to `size` (a side, or (width, height)),
    or, when images differ and no size is given, to the size most of them have (:func:`common_size`)."""
    if not images:
        raise ValueError("no images to batch")
    target = _as_size(size) or common_size(Counter(im.size for im in images))
    arrs = []
    for im in images:
        if im.size != target:
            im = im.resize(target, Image.Resampling.BICUBIC)
        arrs.append(np.asarray(im, dtype=np.float32) / 255.0)
    return torch.from_numpy(np.stack(arrs)).permute(0, 3, 1, 2).contiguous()


def load_image_folder(path: str | Path, size: int | None = None, limit: int | None = None) -> torch.Tensor:
    """Every readable image under a folder as one batch [N, 3, S, S] (the first `limit` files, sorted, when given);
    raise if none can be read."""
    files = _first_images(path, limit)
    ims, bad = [], []
    for f in files:
        try:
            ims.append(read_image(f))
        except ImageReadError as e:
            bad.append(str(e))
    if bad:
        log.warning("skipped %d unreadable image(s) under %s, e.g. %s", len(bad), path, bad[0])
    if not ims:
        raise FileNotFoundError(f"no readable images under {str(path)!r}{other_files_note(path)}")
    return pil_batch(ims, size)


def _first_images(path: str | Path, limit: int | None) -> list[Path]:
    """The image files under `path`, sorted; the first `limit` of them when given."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of images, got {limit} (None reads them all)")
    return find_images([path])[:limit]


def folder_image_size(path: str | Path, limit: int | None = None) -> tuple[int, int] | None:
    """The (width, height) :func:`load_image_folder` batches a folder's images (its first `limit` files, sorted,
    when given) at without a size: the size most of them have (:func:`common_size`), read from the files' headers
    only; None when no header can be read."""
    return _headers_size(_first_images(path, limit))


def _headers_size(files: Sequence[Path]) -> tuple[int, int] | None:
    """:func:`common_size` of `files`, read from their headers only; None when no header can be read."""
    sizes: Counter[tuple[int, int]] = Counter()
    for f in files:
        # an unreadable file is named when it is read, as is a large one (:func:`open_image`): PIL's own warning
        # here named no file
        with contextlib.suppress(OSError, SyntaxError, ValueError, Image.DecompressionBombError):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                im = Image.open(f)
            with im:
                sizes[upright_size(im)] += 1
    return common_size(sizes) if sizes else None


def encode_image_folder(
    path: str | Path,
    encode: Callable[[torch.Tensor], torch.Tensor],
    size: int | tuple[int, int] | None = None,
    batch_size: int = 64,
    limit: int | None = None,
) -> torch.Tensor:
    """``encode(images)`` of every readable image under a folder, [N, ...], `batch_size` images at a time, so that
    memory holds one batch of pixels rather than the folder (10,000 images of 512x512 are 31 GB as float32: FID
    reference folders ran out of memory). Images are resized as :func:`load_image_folder` resizes them: to `size`
    (a side, or (width, height)), or, when their sizes differ, to the size most of them have
    (:func:`folder_image_size`), so the result equals ``encode(load_image_folder(path, size, limit))`` for encoders
    that work image by image (`limit`: the first that many files, sorted)."""
    files = _first_images(path, limit)  # (the folder walked once: its sizes come from these files' headers)
    target = _as_size(size) or _headers_size(files)
    out, chunk, bad = [], [], []
    for i, f in enumerate(files):
        try:
            chunk.append(read_image(f))
        except ImageReadError as e:
            bad.append(str(e))
        if chunk and (len(chunk) == batch_size or i == len(files) - 1):
            try:
                out.append(encode(pil_batch(chunk, target)))
            except ValueError as e:
                # the encoder sees pixels, not files: "stats features need images of at least 3x3" named no folder;
                # the error keeps its class (a caller may catch an encoder's own ValueError subclass)
                e.args = (f"{e} (the images under {str(path)!r})",)
                raise
            chunk = []
    if bad:
        log.warning("skipped %d unreadable image(s) under %s, e.g. %s", len(bad), path, bad[0])
    if not out:
        raise FileNotFoundError(f"no readable images under {str(path)!r}{other_files_note(path)}")
    return torch.cat(out)


def other_files_note(folder: str | Path) -> str:
    """'' or a note naming the files under `folder` that are not read because of their suffix (a folder of .heic
    photos, or of .avif before they were read, was "no readable images" without a word of the files there), or
    because they are hidden (a folder of only ``.a.png`` files said nothing of them)."""
    if not Path(folder).is_dir():
        return ""
    others, hidden = [], []
    for p in sorted(Path(folder).rglob("*")):
        if not p.is_file():
            continue
        if any(part.startswith(".") for part in p.relative_to(folder).parts):
            hidden += [p] if p.suffix.lower() in IMAGE_SUFFIXES else []
        elif p.suffix.lower() not in IMAGE_SUFFIXES:
            others.append(p)
    notes = []
    if others:
        kinds = ", ".join(sorted({p.suffix.lower() or "(no suffix)" for p in others})[:5])
        notes.append(
            f"it holds {len(others)} other file(s), e.g. {others[0].name!r}: {kinds}; images are found by their "
            f"suffix: {', '.join(IMAGE_SUFFIXES)}"
        )
    if hidden:
        shown = str(hidden[0].relative_to(folder))
        notes.append(
            f"it holds {len(hidden)} hidden image(s), e.g. {shown!r}, skipped as hidden files and folders (names "
            "starting with '.') are: rename them to read them"
        )
    return f" ({'; '.join(notes)})" if notes else ""
