"""Labelled image grids (PIL only): model-comparison grids and galleries of failed images with their reasons."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from imgalign.files import replacing

PAD = 6
BG = (255, 255, 255)
LABEL_WIDTH = 180
"""The default width in pixels of a labelled grid's row-label column."""
INK = (20, 20, 20)
MUTED = (90, 90, 90)


def font(size: int = 12) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: the fixed bitmap font
        return ImageFont.load_default()


def text_size(draw: ImageDraw.ImageDraw, text: str, f: ImageFont.ImageFont) -> tuple[int, int]:
    x0, y0, x1, y1 = draw.multiline_textbbox((0, 0), text, font=f, spacing=2)
    return x1 - x0, y1 - y0


def wrap(text: str, width_px: int, f: ImageFont.ImageFont, max_lines: int = 6) -> str:
    """Wrap `text` to lines that fit `width_px` as the font measures them: words greedily, a word wider than a line
    broken between characters (at least 4 a line); more than `max_lines` lines end in '…'. (Wrapping by the
    alphabet's average glyph width let a label of wide letters, or of 26 'a's, run over into the images.)"""
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))

    def fits(line: str) -> bool:
        return probe.textlength(line, font=f) <= width_px

    lines: list[str] = []
    for para in text.splitlines() or [""]:
        line = ""
        for word in para.split():
            if fits(f"{line} {word}" if line else word):
                line = f"{line} {word}" if line else word
                continue
            if line:
                lines.append(line)
            while len(word) > 4 and not fits(word):
                k = max(_fitting_prefix(word, fits), 4)
                lines.append(word[:k])
                word = word[k:]
            line = word
        lines.append(line)
    if len(lines) > max_lines:
        last = lines[max_lines - 1]  # whole where it fits beside the '…' ([:-1] dropped a letter that fitted)
        while last and not fits(last + "…"):
            last = last[:-1]
        # (a cut at a space ended the label in " …")
        lines = lines[: max_lines - 1] + [last.rstrip() + "…"]
    return "\n".join(lines)


def _fitting_prefix(word: str, fits: Callable[[str], bool]) -> int:
    """The length of the longest prefix of `word` that `fits` (0 when not even its first character does)."""
    lo, hi = 0, len(word)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(word[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo


def fit(img: Image.Image, cell: int) -> Image.Image:
    """Scale an image so its longer side is `cell` pixels (nearest-neighbour when enlarging, to keep pixels)."""
    w, h = img.size
    s = cell / max(w, h)
    size = (max(round(w * s), 1), max(round(h * s), 1))
    return img.convert("RGB").resize(size, Image.NEAREST if s > 1 else Image.LANCZOS)


def labelled_grid(
    images: Sequence[Sequence[Image.Image]],
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    captions: Sequence[Sequence[str]] | None = None,
    group: int = 1,
    sub_labels: Sequence[str] | None = None,
    cell: int = 160,
    label_width: int = LABEL_WIDTH,
) -> Image.Image:
    """A grid: `images[r][c]`, a label left of each row, a header over each group of `group` columns (e.g. one
    model's seeds), optional `sub_labels` over each column of a group, optional caption under each image."""
    n_rows = len(images)
    n_cols = len(images[0]) if n_rows else 0
    if n_rows == 0 or n_cols == 0:
        raise ValueError("a grid needs at least one row and one column")
    if (
        any(len(r) != n_cols for r in images)
        or len(row_labels) != n_rows
        or len(col_labels) * group != n_cols
    ):
        raise ValueError("grid images, row labels and column labels do not line up")
    if captions is not None and (len(captions) != n_rows or any(len(r) != n_cols for r in captions)):
        raise ValueError("grid captions do not line up with its images (one caption per image)")
    f, fb = font(12), font(14)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    caps = [[wrap(c, cell, f, 3) for c in row] for row in captions] if captions else None
    cap_h = max((text_size(probe, c, f)[1] for row in caps for c in row if c), default=0) + PAD if caps else 0
    heads = [wrap(c, cell * group, fb, 2) for c in col_labels]
    head_h = max(text_size(probe, h, fb)[1] for h in heads) + 2 * PAD
    sub_h = text_size(probe, "Ag", f)[1] + PAD if sub_labels else 0
    rows_txt = [wrap(r, label_width - 2 * PAD, f, 10) for r in row_labels]
    row_h = max(cell + cap_h, max(text_size(probe, t, f)[1] for t in rows_txt)) + PAD
    width = label_width + n_cols * (cell + PAD) + PAD
    height = head_h + sub_h + n_rows * row_h + PAD
    canvas = Image.new("RGB", (width, height), BG)
    draw = ImageDraw.Draw(canvas)
    for g, head in enumerate(heads):
        x = label_width + g * group * (cell + PAD)
        w = text_size(draw, head, fb)[0]
        draw.multiline_text(
            (x + (group * (cell + PAD) - PAD - w) // 2, PAD), head, fill=INK, font=fb, spacing=2
        )
        if sub_labels:
            for k in range(group):
                lab = sub_labels[(g * group + k) % len(sub_labels)]
                xx = x + k * (cell + PAD) + (cell - text_size(draw, lab, f)[0]) // 2
                draw.text((xx, head_h), lab, fill=MUTED, font=f)
    for r in range(n_rows):
        y = head_h + sub_h + r * row_h
        draw.multiline_text((PAD, y + PAD), rows_txt[r], fill=INK, font=f, spacing=2)
        for c in range(n_cols):
            x = label_width + c * (cell + PAD)
            im = fit(images[r][c], cell)
            canvas.paste(im, (x + (cell - im.width) // 2, y + (cell - im.height) // 2))
            if caps and caps[r][c]:
                draw.multiline_text((x, y + cell + 2), caps[r][c], fill=MUTED, font=f, spacing=2)
    return canvas


def caption_grid(
    images: Sequence[Image.Image], captions: Sequence[str], ncols: int = 6, cell: int = 192, lines: int = 8
) -> Image.Image:
    """Images in rows of `ncols`, each with a multi-line caption under it (a gallery)."""
    if not images:
        raise ValueError("a gallery needs at least one image")
    if ncols < 1:
        raise ValueError(f"a gallery needs at least one column (got ncols={ncols})")
    # zip dropped the images past the last caption silently, and no caption at all was a bare max() error
    if len(captions) != len(images):
        raise ValueError(
            f"a gallery needs one caption per image (got {len(images)} images, {len(captions)} captions)"
        )
    f = font(11)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    caps = [wrap(c, cell, f, lines) for c in captions]
    cap_h = max(text_size(probe, c, f)[1] for c in caps) + PAD
    ncols = min(ncols, len(images))
    nrows = -(-len(images) // ncols)
    canvas = Image.new("RGB", (ncols * (cell + PAD) + PAD, nrows * (cell + cap_h + PAD) + PAD), BG)
    draw = ImageDraw.Draw(canvas)
    for i, (im, cap) in enumerate(zip(images, caps)):
        x = PAD + (i % ncols) * (cell + PAD)
        y = PAD + (i // ncols) * (cell + cap_h + PAD)
        im = fit(im, cell)
        canvas.paste(im, (x + (cell - im.width) // 2, y + (cell - im.height) // 2))
        draw.multiline_text((x, y + cell + 2), cap, fill=INK, font=f, spacing=2)
    return canvas


def save_png(img: Image.Image, path: Path) -> None:
    """Write atomically (a temp name, then rename), creating the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        img.save(tmp, format="PNG")
