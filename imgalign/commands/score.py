"""``imgalign score``: score image files, folders or globs with one or more rewards.

Prompts come from ``--prompts`` (JSONL rows ``{"file": ..., "prompt": ..., optional GenEval metadata}``) or, for
images in the GenEval folder layout (``<index>/samples/<n>.png``), from ``<index>/metadata.jsonl``. Output: one row
per image ``{"file", "prompt", "scores": {reward: value}, "error": null | text}`` as JSONL (CSV when ``--out`` ends
in ``.csv``), and a summary table on stdout. Unreadable files, files without a prompt and images over 100:1 between
their sides (the rewards resize the short side first: a 60000x1 image took 3.7 GB) get an error row; every other file
is still scored; the exit status is 1 when any file failed. A folder ``metadata.jsonl`` that cannot be read
is refused before any reward loads. An existing ``--out`` is replaced only when it is an earlier ``imgalign score``
output (or empty).

``--baseline EARLIER.jsonl`` (an earlier ``imgalign score`` output, e.g. of the base model on the same prompts and
seeds) adds a paired table: per reward, the mean change over the images both files scored and the standard error of
that mean change (std of the per-image differences / sqrt(n)). Pairing the same prompt and seed removes most of the
prompt-to-prompt spread, so this error is far smaller than that of either mean alone. Images pair by their place in
the GenEval layout (``<index>/samples/<n>.png``), elsewhere by file name; a pair whose prompts differ, or two images
with the same key on one side, is an error (the scores are written first).

Interrupted (Ctrl-C, a crash, a kill), a run keeps every image it fully scored in ``.<out name>.partial.jsonl``
beside ``--out``, a batch at a time; the same command run again scores only the rest (an image changed since, or
whose prompt or metadata changed, is scored again) and deletes that file once ``--out`` is written.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import io
import json
import logging
import math
import os
import statistics
import unicodedata
from collections import defaultdict
from pathlib import Path
from typing import Any

from imgalign.cli import CLIError, Interrupted
from imgalign.files import NAME_MAX, atomic_write_text, replacing

log = logging.getLogger(__name__)
MAX_BATCH_PIXELS = 2**26  # pixels per scored batch (768 MiB as float32 RGB), whatever --batch-size says


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score image files with rewards; writes one JSONL/CSV row per image")
    p.add_argument("paths", nargs="+", help="image files, folders (searched recursively) or globs")
    p.add_argument(
        "--reward",
        action="append",
        required=True,
        metavar="NAME[:key=value,...]",
        help="a reward (repeatable), e.g. clip, geneval:mode=strict, artifact; see `imgalign rewards list`",
    )
    p.add_argument(
        "--prompts", help="JSONL with a 'file' and a 'prompt' per row (plus GenEval metadata if needed)"
    )
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--out",
        required=True,
        help="output file (.jsonl, or .csv). CSV cells are written as they are, not escaped for spreadsheets: a "
        "prompt or file name that begins with =, +, - or @ is read as a formula by Excel or LibreOffice (open such "
        "a CSV as text, or use .jsonl)",
    )
    p.add_argument(
        "--baseline",
        help="an earlier `imgalign score` JSONL (e.g. the base model on the same prompts and seeds): also print "
        "each reward's paired mean change and its standard error",
    )
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bars (the libraries' loading bars included)"
    )
    p.set_defaults(func=run_score)


def load_prompt_map(path: str | Path) -> dict[str, dict[str, Any]]:
    """JSONL rows with 'file' and 'prompt' -> {file string: row}; errors name the file and line."""
    path = Path(path)
    if path.is_dir():
        raise CLIError(f"prompt file {str(path)!r} is a folder; give a JSONL file with file/prompt rows")
    if not path.is_file():  # /dev/null, a pipe: "does not exist" of a path that is there
        what = "is not a regular file" if path.exists() else "does not exist"
        raise CLIError(f"prompt file {str(path)!r} {what}; give a JSONL file with file/prompt rows")
    from imgalign.prompts.io import DuplicateKey, read_text, unique_keys

    out: dict[str, dict[str, Any]] = {}
    lines: dict[str, int] = {}  # file -> the line that gave its row
    text = read_text(path, "prompt file", CLIError)
    # only \n ends a row: str.splitlines also splits at U+2028, U+0085 and form feeds, which a JSON string may hold
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, object_pairs_hook=unique_keys)
        except DuplicateKey as e:  # {"file": "a.png", ..., "file": "b.png"} scored b.png without a word
            raise CLIError(f"{path}:{n}: {e}") from None
        except json.JSONDecodeError as e:
            # an indented JSON array (json.dump(rows, f, indent=2)) fails at its first line, "["
            if _json_array(text):
                raise CLIError(_array_message(f"{path}: a JSON array over several lines")) from None
            raise CLIError(
                f"{path}:{n}: not valid JSON ({e.msg}); --prompts takes JSONL, one row per image such as "
                '{"file": "a.png", "prompt": "a photo of a red circle"}'
            ) from None
        # a JSON array was told "each row needs string fields 'file' and 'prompt'"
        if isinstance(row, list):
            raise CLIError(_array_message(f"{path}:{n}: a JSON array"))
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("file"), str)
            or not isinstance(row.get("prompt"), str)
        ):
            raise CLIError(f"{path}:{n}: each row needs string fields 'file' and 'prompt'")
        if not row["prompt"].strip():  # an image scored against "" gets a number that means nothing
            raise CLIError(
                f"{path}:{n}: the prompt of {row['file']!r} is empty; give its prompt or drop the row"
            )
        # GenEval metadata: a misspelt key would silently change verdicts
        _check_geneval_row(row, f"{path}:{n}")
        key = unicodedata.normalize("NFC", row["file"])  # macOS names files in NFD: 'café' has two forms
        if key in out and out[key] != row:
            raise CLIError(
                f"{path}:{n}: file {row['file']!r} already has another row (line {lines[key]}); give each "
                "image one row"
            )
        out[key] = row
        lines.setdefault(key, n)
    if not out:
        raise CLIError(f"prompt file {str(path)!r} holds no rows")
    return out


def _json_array(text: str) -> bool:
    """Whether `text` as a whole is one JSON array."""
    try:
        return isinstance(json.loads(text), list)
    except json.JSONDecodeError:
        return False


def _array_message(what: str) -> str:
    """The error for a --prompts file that is a JSON array (`what` names it), with how to write it as JSONL."""
    return (
        f"{what}, and --prompts takes JSONL, one object per line such as "
        '{"file": "a.png", "prompt": "a photo of a red circle"}; write it so, e.g. with jq -c \'.[]\' FILE'
    )


def _check_geneval_row(row: dict[str, Any], where: str) -> None:
    """The row's prompt text and, where it has GenEval fields, its metadata; errors as CLIError."""
    from imgalign.prompts.io import PromptFileError, check_geneval_fields, check_prompt_text

    try:
        check_prompt_text(row["prompt"], where)
        check_geneval_fields(row, where)
    except PromptFileError as e:
        raise CLIError(str(e)) from None


def name_index(mapping: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """The --prompts rows' keys by their file name in lower case, in the file's order: a run looked each image up by
    name through every row (a Path made of each), so 20,000 images with a prompt file of as many rows, matched by
    name, took about 40 minutes before the first score."""
    index: dict[str, list[str]] = defaultdict(list)
    for k in mapping:
        index[Path(k).name.lower()].append(k)
    return dict(index)


def _lookup(
    file: Path,
    mapping: dict[str, dict[str, Any]],
    base: Path | None,
    scored: frozenset[Path] = frozenset(),
    names: dict[str, list[str]] | None = None,
) -> dict[str, Any] | None:
    """Match a file to a prompt row: as given, resolved, relative to the prompt file's folder, or by name (not a
    row of another image `scored` (resolved paths) in the same run, nor, in the GenEval layout, of another existing
    image: see :func:`_row_of_another_image`). `names`: :func:`name_index` of `mapping`, made once per run."""
    keys = [str(file), str(file.resolve())]
    if base is not None:
        try:
            keys.append(str(file.resolve().relative_to(base.resolve())))
        except ValueError:
            pass
    for k in keys:
        if unicodedata.normalize("NFC", k) in mapping:
            return mapping[unicodedata.normalize("NFC", k)]
    # by name alone only a row that is not another image's: a row of d0/0000.png took d1/0000.png too, over d1's
    # own GenEval metadata.jsonl, and scored it against d0's prompt (the images of another folder, such as the
    # trained model's beside the base model's, still match the rows written for the base model's)
    name = unicodedata.normalize("NFC", file.name)
    same_name = (name_index(mapping) if names is None else names).get(name.lower(), [])
    by_name = [
        mapping[k]
        for k in same_name
        if Path(k).name == name and not _row_of_another_image(k, file, base, scored)
    ]
    return by_name[0] if len(by_name) == 1 else None


def rows_of_absent_files(mapping: dict[str, dict[str, Any]], taken: set[int], base: Path) -> list[str]:
    """The 'file' of each --prompts row that no scored image took (`taken`: the ids of the rows taken) and that
    names no existing file, as given or relative to the prompt file's folder `base`. A row of an existing image that
    is not among those scored is not one: a prompt file may cover more images than a run scores."""
    return [k for k, row in mapping.items() if id(row) not in taken and not _row_exists(k, base)]


def _row_exists(key: str, base: Path) -> bool:
    """Whether a --prompts row's ``file`` `key` names an existing file, as given or relative to `base`."""
    return Path(key).is_file() or (base / key).is_file()


def _row_of_another_image(key: str, file: Path, base: Path | None, scored: frozenset[Path]) -> bool:
    """Whether a prompt row's ``file`` `key`, as given or relative to the prompt file's folder `base`, is an existing
    file other than `file` that is scored in the same run (`scored`: resolved paths), or any other existing file
    when `file` is in the GenEval layout (whose file names repeat in every prompt's folder)."""
    found = [
        p for p in dict.fromkeys([Path(key), *([base / key] if base is not None else [])]) if p.is_file()
    ]
    try:
        if not found or any(p.samefile(file) for p in found):
            return False
        return _in_geneval_layout(file) or any(p.resolve() in scored for p in found)
    except OSError:  # (`file` is gone: it gets its error row when read)
        return False


def _row_name(file: Path, base: Path | None) -> str:
    """How a --prompts row names `file`: relative to the prompt file's folder `base` where it lies inside it."""
    try:
        return str(file.resolve().relative_to(base.resolve())) if base is not None else str(file)
    except ValueError:
        return str(file)


def _in_geneval_layout(file: Path) -> bool:
    """True for ``<index>/samples/<n>.png``: a digit folder holding a ``samples`` folder."""
    return file.parent.name == "samples" and file.parent.parent.name.isdigit()


def _geneval_meta(file: Path, cache: dict[Path, dict[str, Any] | None]) -> dict[str, Any] | None:
    """Metadata of an image in the GenEval layout ``<5-digit>/samples/<n>.png``, else None; raises CLIError naming
    a metadata file that cannot be read. ``cache`` keeps each folder's metadata, read once."""
    if not _in_geneval_layout(file):
        return None
    meta = file.parent.parent / "metadata.jsonl"
    if meta not in cache:
        cache[meta] = _read_geneval_meta(meta)
    return cache[meta]


def _read_geneval_meta(meta: Path) -> dict[str, Any] | None:
    if not meta.is_file():
        return None
    from imgalign.eval.suite import metadata_line
    from imgalign.prompts.io import DuplicateKey, unique_keys

    text = metadata_line(meta, CLIError)
    try:
        row = json.loads(text, object_pairs_hook=unique_keys) if text else None
    except json.JSONDecodeError as e:
        raise CLIError(f"{meta}:1: not valid JSON ({e.msg})") from None
    except DuplicateKey as e:
        raise CLIError(f"{meta}:1: {e}") from None
    if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
        raise CLIError(
            f"{meta}:1: expected a GenEval metadata object with a string 'prompt' that is not empty"
        )
    _check_geneval_row(row, f"{meta}:1")
    return row


def _fmt(v: float) -> str:
    return f"{v:.4f}" if math.isfinite(v) else str(v)


def summary_table(rows: list[dict[str, Any]], keys: list[str]) -> str:
    lines = [f"{'reward':<28} {'n':>6} {'mean':>10} {'std':>10} {'min':>10} {'max':>10}"]
    for k in keys:
        vals = [r["scores"][k] for r in rows if k in r["scores"]]
        if not vals:
            lines.append(f"{k:<28} {0:>6} {'-':>10} {'-':>10} {'-':>10} {'-':>10}")
            continue
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
        lines.append(
            f"{k:<28} {len(vals):>6} {_fmt(mean):>10} {_fmt(std):>10} {_fmt(min(vals)):>10} {_fmt(max(vals)):>10}"
        )
    n_err = sum(1 for r in rows if r["error"])
    lines.append(f"{len(rows)} files, {len(rows) - n_err} fully scored, {n_err} with errors")
    return "\n".join(lines)


def pair_key(file: str | Path) -> str:
    """The key that pairs an image with its baseline: ``<index>/samples/<n>.png`` in the GenEval layout, else the
    file name."""
    file = Path(file)
    return "/".join(file.parts[-3:]) if _in_geneval_layout(file) else file.name


def load_baseline(path: str | Path) -> dict[str, dict[str, Any]]:
    """Rows of an earlier ``imgalign score`` JSONL, by :func:`pair_key`; raises naming the file and line."""
    path = Path(path)
    if not path.is_file():
        what = (
            "is a folder" if path.is_dir() else "is not a regular file" if path.exists() else "does not exist"
        )
        raise CLIError(
            f"--baseline {str(path)!r} {what}; pass the JSONL an earlier `imgalign score --out X.jsonl` wrote"
        )
    from imgalign.prompts.io import read_text

    text = read_text(
        path, "--baseline", CLIError, "pass the .jsonl that `imgalign score --out X.jsonl` wrote"
    )
    out: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}  # column name as written -> today's canonical key
    for i, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        row: Any = None
        try:
            row = json.loads(line)
            scores = row["scores"]
            if not isinstance(scores, dict):
                raise TypeError("scores is not an object")
            key = pair_key(row["file"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            if isinstance(row, dict) and "scores" not in row and {"correct", "reason"} <= row.keys():
                # an `imgalign eval` results.jsonl: it said "is not an `imgalign score` JSONL row ('scores')"
                raise CLIError(
                    f"--baseline {str(path)!r} is an `imgalign eval` results.jsonl (judged images, no reward "
                    f"scores); score its images ({str(path.parent / 'images')!r}) with `imgalign score --reward NAME "
                    "--out X.jsonl` and pass X.jsonl, or compare two evaluations with `imgalign eval ... --baseline "
                    f"{str(path.parent)!r}`"
                ) from e
            raise CLIError(
                f"--baseline {str(path)!r} line {i} is not an `imgalign score` JSONL row ({e}); pass the .jsonl "
                "that `imgalign score --out X.jsonl` wrote (CSV output cannot serve as a baseline)"
            ) from e
        if key in out:
            raise CLIError(_duplicate_key(f"--baseline {str(path)!r}", key, out[key]["file"], row["file"]))
        # a null or text score would crash or be misread in the paired table later
        for k, v in scores.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise CLIError(
                    f"--baseline {str(path)!r} line {i}: score {k!r} is {v!r}, not a number; pass the unedited "
                    ".jsonl that `imgalign score --out X.jsonl` wrote, or delete that score from the row"
                )
            # 1 followed by 400 zeros is a JSON number, and an OverflowError traceback in the paired table
            try:
                float(v)
            except OverflowError:
                raise CLIError(
                    f"--baseline {str(path)!r} line {i}: score {k!r} is an integer too large for a float; pass the "
                    "unedited .jsonl that `imgalign score --out X.jsonl` wrote, or delete that score from the row"
                ) from None
        out[key] = {**row, "scores": _current_keys(scores, names, f"--baseline {str(path)!r} line {i}")}
    if not out:
        raise CLIError(f"--baseline {str(path)!r} holds no rows")
    return out


def _current_keys(scores: dict[str, Any], names: dict[str, str], where: str) -> dict[str, Any]:
    """A baseline's columns under today's canonical :func:`~imgalign.rewards.base.reward_key` (a file written by an
    older imgalign may name ``clip:weight=3.0`` what is now ``clip:weight=3``); a name that no longer parses or
    imports stays as written. ``names`` caches the mapping across rows. Two columns that name one reward with
    different scores (a hand-merged file) are refused naming ``where``: neither can be the baseline."""
    from imgalign.rewards.base import reward_key

    out: dict[str, Any] = {}
    written: dict[str, str] = {}  # canonical key -> the column that gave it
    for k, v in scores.items():
        if k not in names:
            try:
                names[k] = reward_key(k)
            except (ValueError, ImportError, AttributeError):
                names[k] = k
        key = names[k]
        if key in out and not _same_score(out[key], v):
            raise CLIError(
                f"{where}: columns {written[key]!r} and {k!r} are one reward ({key!r}) with different scores "
                f"({out[key]!r} vs {v!r}); keep the one to pair with and delete the other"
            )
        out[key], written[key] = v, k
    return out


def _same_score(a: Any, b: Any) -> bool:
    """Equal scores, NaN equal to NaN."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _duplicate_key(where: str, key: str, first: str, second: str) -> str:
    return (
        f"{where}: {first} and {second} both pair by the key {key!r}, so neither can be paired; score folders in "
        "the GenEval layout (<index>/samples/<n>.png) or give every image a unique file name"
    )


def paired_changes(
    rows: list[dict[str, Any]], baseline: dict[str, dict[str, Any]], keys: list[str]
) -> list[dict[str, Any]]:
    """Per reward: n pairs, both means, the mean change d = mean(x_i - b_i) and its standard error
    std(x_i - b_i, ddof=1) / sqrt(n) (nan for n < 2), over images scored in both (by :func:`pair_key`)."""
    matched: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (row, its baseline row), each key once
    seen: dict[str, str] = {}
    for r in rows:
        key = pair_key(r["file"])
        if key not in baseline:
            continue
        if key in seen:
            raise CLIError(_duplicate_key("the scored images", key, seen[key], r["file"]))
        seen[key] = r["file"]
        matched.append((r, baseline[key]))
    table = []
    for k in keys:
        pairs = []
        for r, b in matched:
            if k not in r["scores"] or k not in b["scores"] or not math.isfinite(b["scores"][k]):
                continue  # a non-finite baseline score (a file from an older imgalign) is an unscored image
            if b.get("prompt") != r["prompt"]:
                raise CLIError(
                    f"{r['file']} pairs with the baseline's {b['file']}, but their prompts differ ({r['prompt']!r} vs "
                    f"{b.get('prompt')!r}): the baseline must score the same prompts in the same layout"
                )
            pairs.append((float(r["scores"][k]), float(b["scores"][k])))
        n = len(pairs)
        if n == 0:
            table.append({"reward": k, "n": 0})
            continue
        d = [x - y for x, y in pairs]
        table.append(
            {
                "reward": k,
                "n": n,
                "baseline": statistics.fmean(y for _, y in pairs),
                "current": statistics.fmean(x for x, _ in pairs),
                "change": statistics.fmean(d),
                "se": statistics.stdev(d) / math.sqrt(n) if n > 1 else math.nan,
            }
        )
    return table


def paired_table(table: list[dict[str, Any]], baseline_path: str) -> str:
    lines = [
        f"paired with {baseline_path} (change = this - baseline on the same images, +- its standard error)",
        f"{'reward':<28} {'n':>6} {'baseline':>10} {'this':>10} {'change':>10} {'+-':>8}",
    ]
    for t in table:
        if not t["n"]:
            lines.append(f"{t['reward']:<28} {0:>6}   no image scored in both (by this reward spec)")
            continue
        lines.append(
            f"{t['reward']:<28} {t['n']:>6} {_fmt(t['baseline']):>10} {_fmt(t['current']):>10} "
            f"{t['change']:>+10.4f} {_fmt(t['se']):>8}"
        )
    return "\n".join(lines)


def write_rows(path: Path, rows: list[dict[str, Any]], keys: list[str]) -> None:
    """JSONL (or CSV for *.csv), written to a temp name then renamed."""
    if path.suffix.lower() == ".csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["file", "prompt", *keys, "error"])
        for r in rows:
            w.writerow([r["file"], r["prompt"], *(r["scores"].get(k, "") for k in keys), r["error"] or ""])
        text = buf.getvalue()
    else:
        text = "".join(json.dumps(r) + "\n" for r in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a file name that is not UTF-8 (os.fsdecode's surrogates; JSON escapes them) is written as the bytes the file
    # system has (atomic_write_text): the CSV failed with "'utf-8' codec can't encode character '\udcff'" after
    # every image was scored
    atomic_write_text(path, text)


def check_replaceable(out: Path) -> None:
    """An existing --out is replaced only when it is empty (or blank) or an ``imgalign score`` output (its first line
    a score row, or its CSV header, file,prompt,...,error): ``--out prompts.jsonl`` typed for ``--prompts`` replaced
    that prompt set with the scores, and ``--out gen/00000/metadata.jsonl`` a folder's GenEval metadata."""
    try:
        if not out.is_file() or out.stat().st_size == 0:
            return
        with out.open("rb") as fh:
            first = b""
            while not first.strip() and (line := fh.readline(1 << 20)):
                first = line
    except OSError:
        return  # (a file that cannot be written is named by check_output_file)
    text = first.decode("utf-8", errors="replace").strip()
    if not text:  # blank lines only (`echo > s.jsonl`): as empty, nothing to lose
        return
    if out.suffix.lower() == ".csv":
        # the whole header, as write_rows writes it: a CSV of file/prompt rows with columns of its own (a prompt
        # list) starts the same way
        header = next(csv.reader([text]), [])
        ours = len(header) >= 3 and header[:2] == ["file", "prompt"] and header[-1] == "error"
    else:
        try:
            row = json.loads(text)
        except json.JSONDecodeError:
            row = None
        ours = isinstance(row, dict) and {"file", "scores"} <= row.keys()
    if not ours:
        raise CLIError(
            f"--out {str(out)!r} exists and is not an `imgalign score` output (its first line is not one it "
            "writes): the scores would replace it; give a new file name, or delete that file first"
        )


def partial_path(out: Path) -> Path:
    """Where an interrupted run keeps the images it fully scored (see the module docstring); where that name is over
    :data:`~imgalign.files.NAME_MAX` bytes (an --out name of 241 to 255 bytes, which the file system takes),
    ``.HASH.partial.jsonl``: such an --out was refused, once the rewards had loaded, as "a file name of 266 bytes",
    naming the hidden file."""
    name = f".{out.name}.partial.jsonl"
    if len(os.fsencode(name)) > NAME_MAX:
        name = f".{hashlib.sha256(os.fsencode(out.name)).hexdigest()[:32]}.partial.jsonl"
    return out.with_name(name)


def claim_partial(partial: Path, out: Path) -> int | None:
    """Take the partial file `partial` of --out `out` for this run: open it (created empty where there is none) and
    hold its exclusive lock (flock) until :func:`release_partial`; the open file, or None where the file system
    takes no lock (said in the log). Two runs with one --out at once shared the file: the first to end deleted it,
    and the other's images went on into a file without its first line, so after a Ctrl-C its "kept in ...: run the
    same command again" was not true (the rerun scored every image again). While one run holds it, another is
    refused before it loads a reward."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no lock
        return None
    partial.parent.mkdir(parents=True, exist_ok=True)
    while True:
        existed = partial.exists()
        fd = os.open(partial, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CLIError(
                f"--out {str(out)!r} is being written by another `imgalign score` now (it holds {str(partial)!r}, "
                "where it keeps the images it has scored): wait for it to end, or give this run another --out"
            ) from None
        except OSError as e:  # a file system without flock (Lustre without -o flock, some NFS)
            if existed:
                os.close(fd)
            else:  # the empty file this run made, which no hold removes later: a run that failed left it behind
                release_partial(partial, fd)
            log.warning(
                "cannot lock %s (%s): scoring without it, so another `imgalign score` with this --out at the same "
                "time is not refused",
                partial,
                e.strerror or e,
            )
            return None
        # the file the run that held it removed (it ended) or replaced while this one waited for it: take it anew
        try:
            now = os.stat(partial)
        except FileNotFoundError:
            now = None
        own = os.fstat(fd)
        if now is not None and (now.st_dev, now.st_ino) == (own.st_dev, own.st_ino):
            return fd
        os.close(fd)


def rewrite_partial(partial: Path, text: str, held: int | None) -> None:
    """Replace the partial file's content with `text`, whole or not at all, keeping this run's lock on it: the new
    file is locked before it is moved into place, and the open file `held` then refers to it."""
    if held is None:
        atomic_write_text(partial, text)
        return
    import fcntl

    with replacing(partial) as tmp:
        tmp.write_text(text, encoding="utf-8")
        fd = os.open(tmp, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
    os.dup2(fd, held)  # (the old file's lock goes with it)
    os.close(fd)


def release_partial(partial: Path, held: int | None) -> None:
    """End this run's hold of its partial file: removed where it is still the empty file :func:`claim_partial`
    created (the run ended before it scored anything), then unlocked."""
    if held is None:
        return
    try:
        own, now = os.fstat(held), os.stat(partial)
        if (now.st_dev, now.st_ino) == (own.st_dev, own.st_ino) and now.st_size == 0:
            partial.unlink()
    except OSError:
        pass
    finally:
        os.close(held)


def _stamp(file: Path) -> list[int]:
    """Size and modification time: an image rewritten since it was scored is scored again."""
    st = file.stat()
    return [st.st_size, st.st_mtime_ns]


def read_partial(path: Path, keys: list[str]) -> dict[str, dict[str, Any]]:
    """The entries ``{"row", "meta", "stamp"}`` an interrupted run with the same rewards kept, by file; empty when
    there is none or it scored other rewards (said in the log). A line cut short by a kill is skipped."""
    if not path.is_file() or path.stat().st_size == 0:  # (empty: the file this run just took)
        return {}
    lines = path.read_text(errors="replace").splitlines()
    try:
        head = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError:
        head = None
    if not isinstance(head, dict) or head.get("rewards") != keys:
        held = head.get("rewards") if isinstance(head, dict) else None
        log.info("not reusing %s: it holds scores of %s, not of %s; scoring every image", path, held, keys)
        return {}
    done: dict[str, dict[str, Any]] = {}
    for line in lines[1:]:
        try:
            entry = json.loads(line)
            done[entry["row"]["file"]] = entry
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    return done


def _reusable(entry: dict[str, Any] | None, f: Path, meta: dict[str, Any] | None, keys: list[str]) -> bool:
    if entry is None or entry.get("meta") != meta or not f.is_file() or entry.get("stamp") != _stamp(f):
        return False
    row = entry["row"]
    return row.get("error") is None and all(k in row.get("scores", {}) for k in keys)


def _append_partial(path: Path, entries: list[dict[str, Any]]) -> None:
    try:
        with path.open("a") as fh:
            fh.write("".join(json.dumps(e) + "\n" for e in entries))
    except OSError as e:
        # a write cut short (`ulimit -f`, a full disk) names no file: the line said "an output file under --out"
        if e.errno is not None and e.filename is None:
            e.filename = str(path)
        raise


MODEL_FILES = ("model_index.json", "imgalign_model.json", "trainer_state")


def _latest_first(folder: Path) -> tuple[int, int, str]:
    """Sort key: a run's checkpoints by step, the latest first (by name, step-1000000 came before step-999999 and
    a superseded-step-… before every step-…), then the other folders by name."""
    from imgalign.trainers.checkpoint import STEP_RE

    m = STEP_RE.match(folder.name)
    return (0, -int(m.group(1)), "") if m else (1, 0, folder.name)


def _model_folder_hint(paths: list[str]) -> str:
    """What to run where a path given is a model (a training checkpoint, a run's checkpoints/, a pipeline): `imgalign
    score CKPT` said only "no image files found", as if the folder were a wrong image folder."""
    for p in map(Path, paths):
        if not p.is_dir():
            continue
        # the folder, its subfolders (a run's checkpoints/: the latest step first) and a run's checkpoints
        below = [c for q in (p, p / "checkpoints") if q.is_dir() for c in q.iterdir() if c.is_dir()]
        inside = [p.parent if p.name == "trainer_state" else p, *sorted(below, key=_latest_first)]
        for d in inside:
            if any((d / name).exists() for name in MODEL_FILES):
                return (
                    f": {str(d)!r} is a model (a checkpoint or pipeline folder), not images; score images it makes "
                    f"with `imgalign eval --model {d} --out DIR` (the suite's prompts, judged) or `imgalign grid "
                    f"--model A={d} --prompts FILE --reward NAME`"
                )
    return ""


def run_score(args: argparse.Namespace) -> int:
    from imgalign.commands import check_device, check_output_file
    from imgalign.commands.world import refuse_empty_options

    if args.batch_size < 1:
        raise CLIError("--batch-size must be at least 1")
    # read as not given: --prompts "" ("$P" with P unset) scored without prompts, --baseline "" printed no change
    refuse_empty_options(
        args,
        {
            "prompts": "a JSONL of file/prompt rows, or leave it out",
            "baseline": "an earlier score JSONL, or leave it out",
            "out": "the output file, e.g. scores.jsonl",
        },
    )
    out = Path(args.out)
    if out.name.lower() in (".jsonl", ".csv", ".json"):  # Path('.jsonl').suffix is '': "must end in .jsonl"
        raise CLIError(f"--out {args.out!r} has no name before {out.name}: give one, e.g. scores{out.name}")
    if out.suffix.lower() not in (".jsonl", ".csv", ".json"):
        raise CLIError(f"--out {args.out!r} must end in .jsonl or .csv (.json is written as JSON lines too)")
    check_output_file(out)
    check_device(args.device)
    if args.baseline and out.exists() and Path(args.baseline).exists() and out.samefile(args.baseline):
        raise CLIError(f"--out {args.out!r} is the --baseline file; write the new scores to another file")
    if args.prompts and out.exists() and Path(args.prompts).exists() and out.samefile(args.prompts):
        raise CLIError(f"--out {args.out!r} is the --prompts file; write the scores to another file")
    check_replaceable(out)
    missing = [
        d for d in out.parents if not d.exists()
    ]  # (created for the partial file; removed if left empty)
    held = claim_partial(partial_path(out), out)
    try:
        return _score(args, out, held)
    finally:
        release_partial(partial_path(out), held)
        for d in missing:
            with contextlib.suppress(OSError):
                d.rmdir()


def _score(args: argparse.Namespace, out: Path, held: int | None) -> int:
    """The scoring of :func:`run_score`, once --out is checked and this run holds its partial file (`held`: the
    open, locked file, None where the file system takes no lock)."""
    from tqdm.auto import tqdm

    from imgalign.commands import check_rewards_once
    from imgalign.rewards.base import build_reward, reward_key
    from imgalign.rewards.io import MAX_ASPECT, ImageReadError, find_images, pil_batch, read_image

    files = find_images(args.paths)
    if not files:
        raise CLIError(f"no image files found in {' '.join(args.paths)}{_model_folder_hint(args.paths)}")
    mapping = load_prompt_map(args.prompts) if args.prompts else None
    baseline = load_baseline(args.baseline) if args.baseline else None
    base = Path(args.prompts).parent if args.prompts else None
    # every image's prompt row before any reward loads: a folder metadata.jsonl that cannot be read (and that
    # --prompts does not stand in for) is refused now, not after the images before it were scored
    cache: dict[Path, dict[str, Any] | None] = {}
    scored = frozenset(f.resolve() for f in files)
    names = name_index(mapping) if mapping is not None else {}
    prompt_rows = {
        f: (_lookup(f, mapping, base, scored, names) if mapping is not None else None)
        or _geneval_meta(f, cache)
        for f in files
    }
    if mapping is not None:
        # the images of a generation cut short: the summary counted the files found, without a word
        absent = rows_of_absent_files(mapping, {id(r) for r in prompt_rows.values()}, base or Path())
        if absent:
            # a prompt file written on Windows ("imgs\\a.png"): here '\\' is part of a file name, not a separator
            windows = [k for k in absent if "\\" in k and _row_exists(k.replace("\\", "/"), base or Path())]
            fix = (
                f"; {len(windows)} of them (e.g. {windows[0]!r}) name a file that is there with '/' in place of "
                "'\\' (a Windows path): write '/' between folders"
                if windows
                else ""
            )
            log.warning(
                "%d of %d --prompts rows name an image that is not there (e.g. %r, found neither as given nor in "
                "%r); it is not scored: check that the images are all there, or correct the rows' 'file'%s",
                len(absent),
                len(mapping),
                absent[0],
                str(base),
                fix,
            )

    # a reward's column is its canonical key (name and non-default options: `geneval:mode=strict`, not `geneval`),
    # so a --baseline pairs only scores of the same reward and options
    check_rewards_once(args.reward)  # it said "'geneval' is given twice" of geneval and geneval:mode=partial
    keys = [reward_key(s) for s in args.reward]
    rewards = {k: build_reward(s, device=args.device) for k, s in zip(keys, args.reward)}  # fails up front
    needs_prompt = any(getattr(r, "needs_prompt", True) for r in rewards.values())
    for k, r in rewards.items():
        if hasattr(r, "ready") and not r.ready():
            raise CLIError(f"{k} cannot score yet: {getattr(r, 'not_ready_help', 'it is not ready')}")
    if needs_prompt and mapping is None and all(m is None for m in prompt_rows.values()):
        which = ", ".join(k for k, r in rewards.items() if getattr(r, "needs_prompt", True))
        raise CLIError(
            f"{which} score(s) an image against its prompt, and none of the {len(files)} image(s) has one: pass "
            "--prompts FILE.jsonl with file/prompt rows, or score a folder in the GenEval layout"
        )

    # the images an interrupted run with the same --out and rewards scored are not scored again; the file is
    # rewritten with just those (a line cut short by a kill would swallow the next one appended)
    partial = partial_path(out)
    done = read_partial(partial, keys)
    kept = [done[str(f)] for f in files if _reusable(done.get(str(f)), f, prompt_rows[f], keys)]
    rewrite_partial(
        partial, json.dumps({"rewards": keys}) + "\n" + "".join(json.dumps(e) + "\n" for e in kept), held
    )
    reused = {e["row"]["file"]: e["row"] for e in kept}
    if reused:
        log.info(
            "%d of %d images were scored by an interrupted run (%s); scoring the rest",
            len(reused),
            len(files),
            partial,
        )

    rows: list[dict[str, Any]] = []
    pending: list[tuple[dict[str, Any], Any, dict[str, Any] | None, list[int]]] = []

    def flush() -> None:
        groups: dict[tuple[int, int], list[tuple[dict[str, Any], Any, dict[str, Any] | None]]] = defaultdict(
            list
        )
        for item in pending:
            groups[item[1].size].append(item[:3])
        for group in groups.values():
            x = pil_batch([g[1] for g in group])
            prompts = [g[0]["prompt"] or "" for g in group]
            metas = [g[2] or {} for g in group]
            for key, reward in rewards.items():
                _score_group(reward, key, x, prompts, metas, [g[0] for g in group])
        # a batch is kept once every reward scored it; rows with an error are scored again by a rerun
        _append_partial(
            partial,
            [{"row": r, "meta": m, "stamp": st} for r, _, m, st in pending if r["error"] is None],
        )
        pending.clear()

    try:
        for f in tqdm(files, desc="score", disable=args.no_progress, unit="img"):
            if str(f) in reused:
                rows.append(reused[str(f)])
                continue
            row: dict[str, Any] = {"file": str(f), "prompt": None, "scores": {}, "error": None}
            rows.append(row)
            meta = prompt_rows[f]
            if meta is not None:
                row["prompt"] = meta["prompt"]
            elif needs_prompt:
                hint = (
                    "add it to --prompts"
                    if mapping is not None
                    else "pass --prompts FILE.jsonl with file/prompt rows"
                )
                # 'IMG_1.jpg' typed for IMG_1.JPG: a case-insensitive macOS or Windows disk hides the typo
                near = names.get(f.name.lower(), [])
                # a row of another image of this very name: it said "differs in letter case" of it
                same = [k for k in near if Path(k).name == f.name]
                # a row of this very image, relative to another folder (GenEval's 00000/samples/0000.png)
                tail = [
                    k
                    for k in same
                    if not Path(k).is_absolute() and f.parts[-len(Path(k).parts) :] == Path(k).parts
                ]
                if tail:
                    hint = (
                        f"--prompts' row {tail[0]!r} ends like its path, but a row names its file as given here or "
                        f"relative to the prompt file's folder ({str(base)!r}): write {_row_name(f, base)!r}"
                    )
                elif same:
                    hint = f"--prompts' row {same[0]!r} is another image of this name; add a row for this one"
                elif near:
                    hint = f"--prompts has {near[0]!r}, which differs in letter case; correct its 'file'"
                row["error"] = f"no prompt for {f}: {hint} (or use the GenEval folder layout)"
                continue
            try:
                stamp = _stamp(f)  # before reading: a file rewritten while it is scored is scored again
                img = read_image(f, MAX_ASPECT)  # (an image of 60000x1 took 3.7 GB in the clip reward)
            except (ImageReadError, OSError) as e:
                # an OSError without text (a plug-in file system's) would be an empty error: no score, yet counted
                # as scored and the exit status 0
                row["error"] = str(e) or f"{type(e).__name__} reading {f}"
                continue
            pending.append((row, img, meta, stamp))
            # large photos batch fewer at a time: 32 images of 6000x6000 would be 14 GB as one float32 batch
            if (
                len(pending) >= args.batch_size
                or sum(p[1].width * p[1].height for p in pending) >= MAX_BATCH_PIXELS
            ):
                flush()
        if pending:
            flush()
        write_rows(out, rows, keys)  # (interrupted in here, every score is kept in the partial file)
    except KeyboardInterrupt:
        n = sum(1 for _ in partial.open()) - 1
        if not n:  # nothing kept: no hidden file left behind to say otherwise
            partial.unlink(missing_ok=True)
            raise Interrupted("interrupted before any image was fully scored") from None
        raise Interrupted(
            f"interrupted; the {n} of {len(files)} images fully scored so far are kept in {partial}: run the same "
            "command again to score the rest"
        ) from None
    partial.unlink(missing_ok=True)
    print(summary_table(rows, keys))
    print(f"wrote {out}")
    if baseline is not None:
        table = paired_changes(rows, baseline, keys)
        print(paired_table(table, args.baseline))
        if any(not t["n"] for t in table):
            held = sorted({k for b in baseline.values() for k in b["scores"]})
            print(
                f"the baseline holds scores of: {', '.join(held) or 'no reward'} (a reward pairs by name and options)"
            )
    return 1 if any(r["error"] for r in rows) else 0


def _score_group(
    reward: Any, key: str, x: Any, prompts: list[str], metas: list[dict], rows: list[dict]
) -> None:
    """Score one same-size batch; if the batch fails, score items one by one so one bad item cannot sink the rest."""
    meta_arg = metas if any(metas) else None
    try:
        scores = reward(x, prompts, meta_arg).scores.tolist()
    except Exception as e:  # noqa: BLE001 -- any reward failure becomes a per-file error row
        if len(rows) == 1:
            _add_error(rows[0], f"{key}: {error_text(e)}")
            return
        for i in range(len(rows)):
            _score_group(reward, key, x[i : i + 1], prompts[i : i + 1], metas[i : i + 1], rows[i : i + 1])
        return
    for row, s in zip(rows, scores):
        if math.isfinite(s):
            row["scores"][key] = float(s)
        else:
            _add_error(row, f"{key}: non-finite score {s}")


def error_text(e: Exception) -> str:
    """A reward's failure as its row's error: a ValueError's message (imgalign's own say what is wrong), any other
    error with its type (a plug-in's KeyError read only "'difficulty'")."""
    return str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"


def _add_error(row: dict[str, Any], msg: str) -> None:
    row["error"] = msg if not row["error"] else f"{row['error']}; {msg}"
