"""Evaluation suites: the GenEval folder layout, a resumable judging loop, and summary / results / report files.

Folder layout (the official GenEval one, so its evaluator can read our outputs and we can read its inputs)::

    DIR/<5-digit prompt index>/metadata.jsonl      one line: the prompt's metadata
    DIR/<5-digit prompt index>/samples/<4-digit>.png

Output of :func:`judge_folder` in ``OUT``: ``results.jsonl`` (one row per image, appended as each is judged, so an
interrupted run keeps its work and a rerun skips an image already judged -- when its bytes and metadata are
unchanged, see :func:`image_digest`), then -- only when every image is judged --
``summary.json`` (written atomically) and ``report.md``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError
from tqdm.auto import tqdm

from imgalign.eval.geneval import ColorFn, Detections, color_from_detection, judge, summarize
from imgalign.files import atomic_write_text, replacing
from imgalign.prompts.io import DuplicateKey, first_line, read_text, unique_keys

log = logging.getLogger(__name__)
# what opening and loading an unreadable image file raises (PIL raises SyntaxError for a PNG with a broken chunk)
UNREADABLE_IMAGE = (OSError, UnidentifiedImageError, SyntaxError, ValueError, Image.DecompressionBombError)


@dataclass
class PromptFolder:
    index: int
    path: Path
    metadata: dict[str, Any]
    samples: list[Path]


def read_folder_index(root: Path) -> list[PromptFolder]:
    """Every prompt folder of a GenEval-layout directory, read and checked up front."""
    return list(read_folder(root))


def short_prompt_folders(folders: Sequence[PromptFolder]) -> str:
    """The prompt folders that hold fewer images than the most any holds (the end of a render or generation cut
    short: it was judged as if whole), in one line saying so; "" when every folder holds as many."""
    most = max((len(f.samples) for f in folders), default=0)
    short = [f for f in folders if len(f.samples) < most]
    if not short:
        return ""
    shown = ", ".join(f"{f.path.name} ({len(f.samples)})" for f in short[:3])
    more = f" and {len(short) - 3} more" if len(short) > 3 else ""
    return (
        f"{len(short)} of {len(folders)} prompt folders hold fewer images than the {most} of the others: {shown}{more}"
        "; their prompts are scored on the images there (a render or generation cut short? complete it, or judge "
        "the folder knowing this)"
    )


def image_digest(path: Path, metadata: dict[str, Any]) -> str:
    """SHA-256 of an image file's bytes and its prompt's metadata: a verdict is reused only for the very image and
    prompt it was given on ('' for an unreadable file, which is judged again)."""
    import hashlib

    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return hashlib.sha256(data + json.dumps(metadata, sort_keys=True).encode()).hexdigest()


def verdict_seal(row: dict[str, Any]) -> str:
    """A short digest of a results.jsonl row's verdict (and the image digest it was given on), kept in the row as
    ``seal``: a rerun into the same --out reuses a verdict only while it matches (a row written before seals
    existed has none, and is reused as before)."""
    import hashlib

    fields = {k: row.get(k) for k in ("sha256", "tag", "prompt", "correct", "partial", "reason", "error")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def write_prompt_folder(
    root: Path, index: int, metadata: dict[str, Any], images: Sequence[Image.Image], start: int = 0
) -> None:
    """Write one prompt's metadata and images in the official layout (images numbered from `start`)."""
    d = Path(root) / f"{index:05d}"
    (d / "samples").mkdir(parents=True, exist_ok=True)
    meta_path = d / "metadata.jsonl"
    line = json.dumps(metadata) + "\n"
    if not meta_path.exists():
        atomic_write_text(meta_path, line)
    elif meta_path.read_text() != line:
        raise ValueError(
            f"{meta_path} holds another prompt ({meta_path.read_text().strip()}), not {line.strip()}: the folder "
            "is from an earlier run; write to a new or empty folder"
        )
    for j, img in enumerate(images, start=start):
        write_sample(root, index, j, img)


def write_sample(root: Path, index: int, j: int, image: Image.Image) -> None:
    """Write image `j` of prompt folder `index` (whose samples/ folder exists), atomically."""
    with replacing(Path(root) / f"{index:05d}" / "samples" / f"{j:04d}.png") as tmp:
        image.save(tmp, format="PNG")


def _number_order(path: Path) -> tuple[int, str]:
    """Sort key of a numbered prompt folder or sample: its number, then its name (0007 and 7 both present)."""
    return int(path.stem), path.name


def read_folder(root: Path) -> Iterator[PromptFolder]:
    """Iterate prompt folders of a GenEval-layout directory; a bad metadata file raises naming the file."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ValueError(
            f"{str(root)!r} is a file; give an image folder in the GenEval layout (<index>/metadata.jsonl, "
            "<index>/samples/*.png)"
        )
    if not root.is_dir():
        raise FileNotFoundError(f"image folder {str(root)!r} does not exist")
    # in number order: past 99999 prompts or 9999 images the names grow a digit (10000.png sorted before 1001.png)
    dirs = sorted((p for p in root.iterdir() if p.is_dir() and p.name.isdecimal()), key=_number_order)
    if not dirs:
        # e.g. the --out of `imgalign eval --model`, whose generated images are in its images/ folder
        inner = [
            c
            for c in sorted(root.iterdir())
            if c.is_dir() and any(g.is_dir() and g.name.isdecimal() for g in c.iterdir())
        ]
        hint = f"; its sub-folder {str(inner[0])!r} does: give that" if inner else ""
        from imgalign.rewards.io import IMAGE_SUFFIXES

        # a flat image folder
        if not inner and any(c.suffix.lower() in IMAGE_SUFFIXES for c in root.iterdir()):
            hint = (
                f" (it holds images directly: `imgalign score {root} --prompts FILE.jsonl --reward "
                "geneval:mode=strict` judges such a folder, one file/prompt/GenEval metadata row per image)"
            )
        raise FileNotFoundError(
            f"{str(root)!r} holds no prompt folders{hint}; expected the GenEval layout <5-digit index>/metadata.jsonl "
            "and <index>/samples/<4-digit>.png"
        )
    for d in dirs:
        meta_path = d / "metadata.jsonl"
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path} is missing: every prompt folder needs its metadata.jsonl")
        text = metadata_line(meta_path, ValueError)  # a BOM from an editor is not an error
        try:
            meta = json.loads(text, object_pairs_hook=unique_keys) if text else None
        except json.JSONDecodeError as e:
            raise ValueError(f"{meta_path}: line 1 is not valid JSON ({e.msg})") from None
        except DuplicateKey as e:
            # {"include": [...], ..., "include": [...]} was judged by the last, without a word
            raise ValueError(f"{meta_path}: line 1: {e}") from None
        if not isinstance(meta, dict) or "tag" not in meta or "include" not in meta:
            raise ValueError(
                f"{meta_path}: line 1 must be a GenEval metadata object with 'tag' and 'include'"
            )
        # like the official evaluator, only numbered samples count (a stray grid.png does not)
        samples = (
            sorted((p for p in (d / "samples").glob("*.png") if p.stem.isdecimal()), key=_number_order)
            if (d / "samples").is_dir()
            else []
        )
        yield PromptFolder(int(d.name), d, meta, samples)


def metadata_line(path: Path, error: type[Exception]) -> str:
    """The first line of a prompt folder's ``metadata.jsonl`` (:func:`first_line`; "" for an empty file), the one
    that counts. A file of several rows (another prompt's row appended, or a prompt file copied in) is warned about:
    it was judged by its first row without a word (the official GenEval evaluator refuses it as not one object). A
    first line that is no JSON (an object written over several lines) is returned for the caller to name."""
    text = first_line(path, "metadata file", error)
    rows = [line for line in read_text(path, "metadata file", error).split("\n") if line.strip()]
    if len(rows) > 1 and _is_json(text):
        log.warning(
            "%s holds %d metadata rows; only its first is read, as this folder's prompt's (a prompt folder's "
            "metadata.jsonl holds one row): keep the row of this folder's prompt",
            path,
            len(rows),
        )
    return text


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def load_image(path: Path, shown: Path | None = None) -> Image.Image:
    """Open an image fully (so truncation errors surface here) and convert it to RGB as the rewards do
    (:func:`~imgalign.rewards.base.pil_to_rgb`): 16-bit and float images are scaled to 8 bits (PIL's convert clips
    them at 255: a 16-bit PNG was judged as a white image), and transparency is composited on black (PIL's convert
    dropped it, showing whatever colour the transparent pixels hold: a grey+alpha PNG with white under its
    transparent background was judged incorrect here and correct by ``score --reward geneval:mode=strict``).
    `shown`: the file to name (the user's, where `path` is a copy) in a warning that only the first frame of an
    animated image (an APNG, a GIF named .png) is judged, as ``imgalign score`` warns (None: no such warning), and
    in :func:`~imgalign.rewards.io.open_image`'s of a very large image."""
    from imgalign.rewards.io import decoded_rgb, open_image

    with open_image(path, shown) as im:
        return decoded_rgb(im, shown, "judged")


def judge_folder(
    images_dir: Path,
    out_dir: Path,
    detector: Callable[[Image.Image], Detections],
    color_fn: ColorFn = color_from_detection,
    suite: str = "shapes",
    model: str = "ground-truth",
    validate_metadata: Callable[[dict[str, Any]], None] | None = None,
    progress: bool = True,
    sampler: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    source_dir: Path | None = None,
) -> dict[str, Any]:
    """Judge every image of a GenEval-layout folder; write results.jsonl, summary.json and report.md to `out_dir`.
    `source_dir`: the user's folder that `images_dir` is a copy of; metadata errors name its files (an edit of the
    copy would be undone by the next refresh).
    `sampler` (the settings the images were generated with, if this run generated them) is recorded in both;
    `extra` fields (e.g. the command's arguments) go into summary.json.

    Unreadable images and metadata that fails `validate_metadata` get a failure row (``correct: false`` with an
    ``error``) naming the file and the problem, and count as incorrect. (The official evaluator skips missing
    images and crashes on unreadable ones; we keep going and say so, and the exit status reports it.)"""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = out_dir / "results.jsonl"
    done: dict[str, dict[str, Any]] = {}
    if results_path.exists():
        for line in results_path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash: judged again below
            # JSON that is no verdict ('[1]', a row without its file: a hand edit) raised TypeError here
            if isinstance(row, dict) and isinstance(row.get("file"), str):
                done[row["file"]] = row
        # rewrite without any partial line
        atomic_write_text(results_path, "".join(json.dumps(r) + "\n" for r in done.values()))
    folders = list(read_folder(images_dir))
    total = sum(max(len(f.samples), 1) for f in folders)
    rows: list[dict[str, Any]] = []
    stale_dropped = False
    with (
        open(results_path, "a") as fh,
        tqdm(total=total, desc="judging", disable=not progress, unit="img") as bar,
    ):
        for f in folders:
            meta_error = None
            if validate_metadata is not None:
                try:
                    validate_metadata(f.metadata)
                except ValueError as e:
                    shown = Path(source_dir) / f.path.relative_to(images_dir) if source_dir else f.path
                    meta_error = f"{shown / 'metadata.jsonl'}: {e}"
            samples = f.samples or [f.path / "samples" / "0000.png"]
            src_samples = (
                Path(source_dir) / f.path.relative_to(images_dir) if source_dir else f.path
            ) / "samples"
            if f.samples and (unread := _unread_samples(src_samples, frozenset(p.name for p in f.samples))):
                log.warning("%s: not every image is judged%s", src_samples, unread)
            for s in samples:
                key = str(s.relative_to(images_dir))
                digest = image_digest(s, f.metadata)
                if digest and key in done and done[key].get("sha256") == digest and not meta_error:
                    if verdict_seal(done[key]) == done[key].get("seal", verdict_seal(done[key])):
                        rows.append(done[key])
                        bar.update()
                        continue
                    # a verdict edited by hand (correct false -> true) was reused as the image's, and the rerun's
                    # summary reported it without a word
                    log.warning(
                        "%s: the row of %s was changed since it was judged (edited by hand?): judged again",
                        results_path,
                        key,
                    )
                if not stale_dropped:  # the first verdict that changes: the old summary no longer describes
                    # results.jsonl, so an interrupted run must not leave it behind
                    for name in ("summary.json", "report.md", "comparison.md", "failures.png"):
                        (out_dir / name).unlink(missing_ok=True)
                    stale_dropped = True
                row: dict[str, Any] = {
                    "file": key,
                    "sha256": digest,
                    "tag": f.metadata.get("tag"),
                    "prompt": f.metadata.get("prompt"),
                }
                if meta_error:
                    row.update(correct=False, partial=0.0, reason="", error=meta_error)
                else:
                    shown = Path(source_dir) / key if source_dir else s  # the user's file, not our copy
                    try:
                        img = load_image(s, shown)
                    except UNREADABLE_IMAGE as e:
                        img = None
                        why = (  # PIL's own text names our copy
                            "not an image file PIL can read"
                            if isinstance(e, UnidentifiedImageError)
                            else (e.strerror if isinstance(e, OSError) and e.strerror else str(e))
                        )
                        error = f"cannot read image {shown}: {why}"
                        if not f.samples:  # the stand-in for a prompt folder without images
                            error = (
                                f"{shown.parent.parent}: the prompt folder holds no image (no samples/*.png)"
                                f"{_unread_samples(shown.parent)}; the prompt counts as one incorrect image"
                            )
                        row.update(correct=False, partial=0.0, reason="", error=error)
                    if img is not None:
                        try:
                            j = judge(img, detector(img), f.metadata, color_fn)
                            row.update(correct=j.correct, partial=j.partial, reason=j.reason, error=None)
                        except ValueError as e:  # the detector or colour judge refused this image or prompt
                            row.update(
                                correct=False, partial=0.0, reason="", error=f"judge error on {key}: {e}"
                            )
                if row["error"]:
                    log.warning(row["error"])
                row["seal"] = verdict_seal(row)
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                rows.append(row)
                bar.update()
    # exactly this run's rows: a re-judged image's earlier verdict and files no longer in the folder are dropped
    atomic_write_text(results_path, "".join(json.dumps(r) + "\n" for r in rows))
    overall, tasks = summarize(rows)
    task_images: dict[str, int] = {}
    for r in rows:
        task_images[r["tag"]] = task_images.get(r["tag"], 0) + 1
    summary = {
        "suite": suite,
        "model": model,
        "overall": overall,
        "tasks": tasks,
        "n_images": len(rows),
        "n_prompts": len(folders),
        "task_images": task_images,
        "n_errors": sum(1 for r in rows if r.get("error")),
    }
    if extra:
        summary.update(extra)
    if sampler is not None:
        summary["sampler"] = sampler
    atomic_write_text(out_dir / "report.md", render_report(summary, rows))
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


def _unread_samples(samples: Path, read: frozenset[str] = frozenset()) -> str:
    """The images of a samples folder that the layout does not read (``0000.PNG``, ``0000.jpg``, ``img.png``; not
    those in `read`, nor hidden files), said with what to do; "" when it holds none."""
    if not samples.is_dir():
        return ""
    from imgalign.rewards.io import IMAGE_SUFFIXES

    names = sorted(
        p.name
        for p in samples.iterdir()
        if p.suffix.lower() in IMAGE_SUFFIXES
        and p.name not in read
        and not p.name.startswith(".")
        and p.is_file()
    )
    if not names:
        return ""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (
        f"; it holds {shown}, but the GenEval layout reads only <n>.png (lower-case): convert or rename them"
    )


def render_report(summary: dict[str, Any], rows: Sequence[dict[str, Any]], max_failures: int = 20) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["tag"]] = counts.get(r["tag"], 0) + 1
    lines = [
        f"# GenEval-style evaluation: suite `{summary['suite']}`, model `{summary['model']}`",
        "",
        f"Overall: **{summary['overall']:.4f}** over {summary['n_images']} images"
        + (f" ({summary['n_errors']} could not be judged)" if summary.get("n_errors") else ""),
        "",
    ]
    if "sampler" in summary:
        settings = ", ".join(f"{k} {v}" for k, v in summary["sampler"].items()) or "the pipeline's defaults"
        lines += [f"Sampler: {settings}", ""]
    lines += [
        "| task | score | images |",
        "| --- | ---: | ---: |",
    ]
    for t, v in summary["tasks"].items():
        lines.append(f"| {t} | {v:.4f} | {counts.get(t, 0)} |")
    fails = [r for r in rows if not r["correct"]][:max_failures]
    if fails:
        lines += [
            "",
            f"## First {len(fails)} failures",
            "",
            "| file | prompt | reason |",
            "| --- | --- | --- |",
        ]
        for r in fails:
            why = r.get("error") or r.get("reason") or ""
            lines.append(f"| {table_cell(r['file'])} | {table_cell(r['prompt'])} | {table_cell(why)} |")
    return "\n".join(lines) + "\n"


def table_cell(text: Any) -> str:
    """`text` as one markdown table cell: a line break or a '|' in it (a prompt "line one\\nline two", "a | b")
    ended the row or split it into more columns."""
    return "; ".join(str(text).splitlines()).replace("|", "/")


def copy_folder(src: Path, dst: Path) -> None:
    """Copy a GenEval-layout folder (metadata and samples) to `dst`, each file whole or not at all: a copy cut
    short (a full disk, a file-size limit) left the image it was copying truncated under its final name."""
    for f in read_folder(src):
        target = Path(dst) / f.path.name
        (target / "samples").mkdir(parents=True, exist_ok=True)
        for s in f.samples:
            if s.is_dir():  # shutil's "[Errno 21] Is a directory: '.../0000.png'" said nothing to do
                raise IsADirectoryError(
                    f"{s} is a folder, where the GenEval layout holds an image (<index>/samples/<n>.png): move it out "
                    "of the samples folder, or put the image in its place"
                )
            if s.is_symlink() and not s.exists():  # shutil's bare "[Errno 2] No such file or directory"
                raise FileNotFoundError(
                    f"{s} is a symlink whose target does not exist ({os.readlink(s)}): restore or mount its target, "
                    "or remove the link"
                )
        for s, t in [(f.path / "metadata.jsonl", target / "metadata.jsonl")] + [
            (s, target / "samples" / s.name) for s in f.samples
        ]:
            with replacing(t) as tmp:
                shutil.copy2(s, tmp)
