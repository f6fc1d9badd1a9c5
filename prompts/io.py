"""Prompt files: plain .txt (one prompt per line), .jsonl (``prompt`` plus metadata), and GenEval metadata files.

Every loader returns :class:`PromptRecord` objects and raises :class:`PromptFileError` naming the file, the line and
the field when a line is malformed.
"""

from __future__ import annotations

import difflib
import json
import logging
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PROMPT_SUFFIXES = (".txt", ".jsonl", "")
"""Prompt files :func:`load_prompts` reads: .jsonl as JSON lines, .txt (or no suffix) as one prompt per line."""


def clean_prompt(text: str) -> str:
    """`text` without leading or trailing whitespace or invisible format characters (a zero-width space, joiner or
    word joiner, a BOM: Unicode category Cf), which ``str.strip`` keeps; a line of only those is empty, not a
    prompt of invisible text."""
    start, end = 0, len(text)
    while start < end and _invisible(text[start]):
        start += 1
    # tag characters (U+E0020-U+E007F, also Cf) end a subdivision flag emoji: a prompt ending in the Scotland
    # flag lost them and showed a black flag
    while end > start and _invisible(text[end - 1]) and not "\U000e0020" <= text[end - 1] <= "\U000e007f":
        end -= 1
    return text[start:end]


def _invisible(char: str) -> bool:
    """Whether `char` is whitespace or an invisible format character (Unicode category Cf)."""
    return char.isspace() or unicodedata.category(char) == "Cf"


class PromptFileError(ValueError):
    """A prompt or metadata file that cannot be read; the message names the file, line and field."""


@dataclass
class PromptRecord:
    prompt: str
    metadata: dict[str, Any] = field(default_factory=dict)
    line: int = 0  # its line in the file, from 1 (0: not read from a file)


INCLUDE_KEYS = ("class", "count", "color", "position")
"""The keys of a GenEval include clause (those the official evaluator and our judge read)."""
EXCLUDE_KEYS = ("class", "count")
TAG_NEEDS = {"colors": "color", "color_attr": "color", "position": "position"}
"""The clause key each of these GenEval tasks judges (every line of GenEval's own file has it)."""
TAG_EXAMPLES = {"color": '"color": "red"', "position": '"position": ["left of", 0]'}


def _check_clause_keys(clause: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    """Refuse a key the judge does not read: a misspelt 'colour' or 'positon' left the colour or the position
    unjudged, a lenient score without a word."""
    for key in clause:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            fix = f"did you mean {close[0]!r}?" if close else "delete it or spell it as GenEval does"
            raise PromptFileError(
                f"{where}: key {key!r} is not one GenEval reads ({', '.join(known)}), so it would not be judged: "
                + fix
            )


def _check_count(count: int, where: str, effect: str) -> None:
    """Refuse a count above the judge's cap: GenEval keeps at most 16 detections per class, so more are never
    found (a count of 20 failed every image, or excluded nothing, without a word)."""
    from imgalign.eval.geneval import MAX_OBJECTS

    if count > MAX_OBJECTS:
        raise PromptFileError(
            f"{where} is {count}: GenEval keeps at most {MAX_OBJECTS} detections per class, so {effect}; give "
            f"{MAX_OBJECTS} or less"
        )


def _check_relation(relation: str, where: str) -> None:
    """Refuse a relation GenEval does not judge: 'left' or 'to the left of' failed every image ("expected circle
    left target") without a word, and the dense geneval reward died with a KeyError traceback."""
    from imgalign.shapes import RELATIONS  # GenEval's four

    if relation not in RELATIONS:
        close = difflib.get_close_matches(relation, RELATIONS, n=1)
        fix = f"did you mean {close[0]!r}?" if close else "spell it as GenEval does"
        raise PromptFileError(
            f"{where}: relation {relation!r} is not one GenEval judges ({', '.join(RELATIONS)}), so no image "
            f"could pass: {fix}"
        )


def check_prompt_text(prompt: str, where: str) -> None:
    """Refuse a prompt holding a lone UTF-16 surrogate (JSON's ``\\ud83d`` without its pair), which is no character:
    the tokenizers raised a TypeError traceback once the model had loaded, and a CSV could not be written."""
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        half = ord(prompt[e.start])
        raise PromptFileError(
            f"{where}: the prompt holds \\u{half:04x}, half of a UTF-16 surrogate pair without its other half, which "
            "is no character: write the character itself, or both halves of its escape"
        ) from None


def validate_geneval_line(meta: Any, where: str) -> dict[str, Any]:
    """Check one GenEval metadata object against the official schema (tag, prompt, include[], exclude[])."""
    if not isinstance(meta, dict):
        raise PromptFileError(f"{where}: expected a JSON object, got {type(meta).__name__}")
    for key in ("tag", "prompt", "include"):
        if key not in meta:
            raise PromptFileError(f"{where}: field {key!r} is missing")
    if not isinstance(meta["prompt"], str) or not clean_prompt(meta["prompt"]):
        raise PromptFileError(f"{where}: field 'prompt' must be a non-empty string")
    check_prompt_text(meta["prompt"], where)
    if not isinstance(meta["include"], list) or not meta["include"]:
        raise PromptFileError(f"{where}: field 'include' must be a non-empty list")
    for key in meta:  # an 'excludes' went unread: every count passed however many objects were drawn
        if key != "exclude" and difflib.get_close_matches(key.lower(), ["exclude"], cutoff=0.8):
            raise PromptFileError(
                f"{where}: field {key!r} is not GenEval's, so its clauses would not be judged; spell it 'exclude'"
            )
    for i, c in enumerate(meta["include"]):
        if not isinstance(c, dict) or not isinstance(c.get("class"), str):
            raise PromptFileError(f"{where}: include[{i}].class must be a string")
        _check_clause_keys(c, INCLUDE_KEYS, f"{where}: include[{i}]")
        # the judge reads every clause's count; a clause without one asks for 1
        count = c.setdefault("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise PromptFileError(f"{where}: include[{i}].count must be a positive integer, got {count!r}")
        _check_count(count, f"{where}: include[{i}].count", "the image could never pass")
        if "color" in c and not isinstance(c["color"], str):
            raise PromptFileError(f"{where}: include[{i}].color must be a string")
        if "position" in c:
            pos = c["position"]
            if not (
                isinstance(pos, list)
                and len(pos) == 2
                and isinstance(pos[0], str)
                and isinstance(pos[1], int)
                and not isinstance(pos[1], bool)
            ):
                raise PromptFileError(f"{where}: include[{i}].position must be [relation, target index]")
            _check_relation(pos[0], f"{where}: include[{i}].position")
            if not 0 <= pos[1] < i:
                raise PromptFileError(
                    f"{where}: include[{i}].position target {pos[1]} must name an earlier clause"
                )
    exclude = meta.get("exclude", []) or []
    if not isinstance(exclude, list):
        raise PromptFileError(f"{where}: field 'exclude' must be a list of {{class, count}} objects")
    for i, c in enumerate(exclude):
        count = c.get("count") if isinstance(c, dict) else None
        if (
            not isinstance(c, dict)
            or not isinstance(c.get("class"), str)
            or isinstance(count, bool)
            or not isinstance(count, int)
            or count < 1
        ):
            raise PromptFileError(
                f"{where}: exclude[{i}] must have a string 'class' and a positive integer 'count'"
            )
        _check_clause_keys(c, EXCLUDE_KEYS, f"{where}: exclude[{i}]")
        _check_count(count, f"{where}: exclude[{i}].count", "the exclusion could never apply")
    from imgalign.shapes import TASKS  # GenEval's six tasks

    # a misspelt tag was judged under the 0.3 threshold and reported as a task of its own
    if meta["tag"] not in TASKS:
        raise PromptFileError(
            f"{where}: field 'tag' is {meta['tag']!r}, not a GenEval task ({', '.join(TASKS)}); it sets the "
            "detection threshold (counting's is 0.9) and the task the image counts toward: spell it as GenEval does"
        )
    # the task's own test left out: an image judged on its objects alone was counted as passing colours or position
    needed = TAG_NEEDS.get(meta["tag"])
    if needed and not any(needed in c for c in meta["include"]):
        raise PromptFileError(
            f"{where}: tag {meta['tag']!r} asks for an include clause with a {needed!r}, and none has one, so the "
            f"{needed} would not be judged: give it (e.g. {TAG_EXAMPLES[needed]}), or the tag of what the prompt asks"
        )
    return meta


def check_geneval_fields(row: dict[str, Any], where: str) -> None:
    """Validate a prompt row that has a GenEval field ('tag' or 'include'; a row with neither is plain). A 'tag'
    without 'include' is said to be read as GenEval's: "field 'include' is missing" told a user with a 'tag' of
    their own nothing."""
    if "include" in row:
        validate_geneval_line(row, where)
    elif "tag" in row:
        try:
            validate_geneval_line(row, where)
        except PromptFileError as e:
            raise PromptFileError(
                f"{e}; a line with a 'tag' field is read as GenEval metadata (tag, include, prompt): rename 'tag' "
                "if it is a label of your own"
            ) from None


def read_text(
    path: str | Path, what: str, error: type[Exception] = PromptFileError, hint: str = "save it as UTF-8"
) -> str:
    """The text of a UTF-8 file (a BOM from a Windows editor dropped). A file that cannot be read or is not UTF-8
    raises `error` saying ``cannot read <what> '<path>': <why>`` (plus `hint` for a non-UTF-8 file), so no caller
    shows a bare codec error that names no file. A NUL character is refused too: UTF-16 without a BOM decodes as
    UTF-8 with a NUL beside every ASCII letter (prompts such as 'a\\x00 \\x00r\\x00e\\x00d' were trained on)."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # read_text turns \r\n and \r into \n
    except UnicodeDecodeError as e:
        # a UTF-16 file with its byte-order mark (Windows Notepad's "Unicode") fails at byte 0, 0xff or 0xfe; its
        # Latin letters leave a NUL byte beside each (other bytes after 0xff 0xfe are no sign of UTF-16)
        data = e.object
        utf16 = data[:2] in (b"\xff\xfe", b"\xfe\xff") and b"\x00" in data[2:]
        kind = "it is UTF-16 text, not UTF-8" if utf16 else "it is not UTF-8 text"
        raise error(f"cannot read {what} {str(path)!r}: {kind} ({e}); {hint}") from None
    except OSError as e:
        raise error(f"cannot read {what} {str(path)!r}: {e}") from None
    if "\0" in text:
        line = text.count("\n", 0, text.index("\0")) + 1
        raise error(
            f"cannot read {what} {str(path)!r}: it is not UTF-8 text (line {line} holds a NUL character, as "
            f"UTF-16 text or a binary file does); {hint}"
        )
    return text


def _lines(path: Path, what: str) -> list[str]:
    """The file's lines: a BOM is part of none (files saved with one and joined with ``cat`` have one at the start of
    a later line: a .txt line was a prompt apart from its copy without one, a .jsonl line "not valid JSON"), and
    only newlines end a line (``str.splitlines`` also splits at U+2028, U+0085 and form feeds, which JSON strings
    and prompts may hold)."""
    return [line.removeprefix("\ufeff") for line in read_text(path, what).split("\n")]


def first_line(path: str | Path, what: str, error: type[Exception] = PromptFileError) -> str:
    """The first line of a prompt folder's ``metadata.jsonl`` (:func:`read_text`; leading blank lines and spaces
    dropped, "" for an empty file), ended at a newline only, as :func:`_lines` ends lines."""
    return read_text(path, what, error).strip().split("\n")[0]


class DuplicateKey(ValueError):
    """A JSON object names a key twice (json.loads keeps the last without a word)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` refusing a key given twice in one object: {"prompt": "a cat", ..., "prompt": "a dog"}
    trained on the dog, silently (a line merged from two files, or edited by hand)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(
                f"key {key!r} appears twice in one object ({out[key]!r} and {value!r}); keep the one you mean"
            )
        out[key] = value
    return out


# what a line of plain text in a .jsonl is told (a prompt list saved under the wrong suffix, or a line typed by hand)
PROMPTS_PLAIN = (
    'each .jsonl line is a JSON object such as {"prompt": "a photo of a cat"}; a list of plain prompts, one per '
    "line, goes in a .txt file"
)
GENEVAL_PLAIN = (
    'each line is a GenEval metadata object such as {"tag": "single_object", "include": [{"class": "cat", '
    '"count": 1}], "prompt": "a photo of a cat"}'
)


def _not_json(path: Path, n: int, e: json.JSONDecodeError, lines: list[str], plain: str) -> PromptFileError:
    """The error for line `n` that is not JSON; a file that is one JSON document over several lines (an array, a
    pretty-printed object) is named as such: its first line was said to be "not valid JSON" and no more. A line of
    plain text (a prompt list saved as .jsonl) gets `plain`, what the file should hold instead."""
    message = f"{path}:{n}: not valid JSON ({e.msg})"
    try:
        json.loads("\n".join(lines))
    except json.JSONDecodeError:
        if not lines[n - 1].lstrip().startswith(("{", "[", '"')):
            message += f"; the line is plain text, and {plain}"
        return PromptFileError(message)
    return PromptFileError(
        f"{message}: the file is one JSON document over several lines (an array or an indented object), and a "
        ".jsonl holds one JSON object per line; write it so, e.g. with jq -c '.[]' FILE for an array"
    )


def load_geneval_metadata(path: str | Path) -> list[dict[str, Any]]:
    """Read a GenEval ``evaluation_metadata.jsonl`` (the official file or one of ours); validate every line."""
    path = Path(path)
    if path.is_dir():  # it said "does not exist" of a folder that does
        raise PromptFileError(f"metadata file {str(path)!r} is a folder; give a .jsonl file")
    if not path.is_file():
        from imgalign.hub import tilde_hint

        raise PromptFileError(f"metadata file {str(path)!r} does not exist{tilde_hint(str(path))}")
    if path.suffix.lower() == ".txt":
        raise PromptFileError(
            f"metadata file {str(path)!r} is a .txt prompt list, which has no GenEval metadata; give a .jsonl with one "
            "GenEval object per line ('tag', 'include', 'prompt'), e.g. GenEval's evaluation_metadata.jsonl"
        )
    out = []
    lines = _lines(path, "metadata file")
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            meta = json.loads(line, object_pairs_hook=unique_keys)
        except json.JSONDecodeError as e:
            raise _not_json(path, n, e, lines, GENEVAL_PLAIN) from None
        except DuplicateKey as e:
            raise PromptFileError(f"{path}:{n}: {e}") from None
        out.append(validate_geneval_line(meta, f"{path}:{n}"))
    if not out:
        raise PromptFileError(f"metadata file {str(path)!r} holds no prompts")
    return out


def _is_json_object(line: str) -> bool:
    """True for a line that is a whole JSON object (a .jsonl line saved under a .txt name)."""
    if not line.strip().startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


PROMPT_KEYS = ("prompt", "prompts", "text", "caption", "captions")
"""Names other tools give a prompt column or key: a CSV export's header line, a JSONL line's key (named when a line
has one of them and no 'prompt')."""


def _warn_if_csv_export(path: Path, cleaned: list[str]) -> None:
    """Warn of a .txt prompt file written as a one-column CSV (a spreadsheet's or pandas' export saved as .txt): its
    header ('prompt') and the double quotes around each prompt holding a comma were trained on as prompt text,
    silently. They stay prompts, as a prompt may be quoted: the warning names the lines."""
    lines = [(n, p) for n, p in enumerate(cleaned, start=1) if p]
    header = lines[0] if lines and lines[0][1].strip('"').lower() in PROMPT_KEYS else None
    quoted = [n for n, p in lines if len(p) >= 2 and p[0] == p[-1] == '"']
    if not header and not quoted:
        return
    found = []
    if header:
        found.append(f"line {header[0]} is {header[1]!r}, a column header")
    if quoted:
        found.append(f"{len(quoted)} line(s) are wrapped in double quotes (first: line {quoted[0]})")
    logger.warning(
        "prompt file %r looks like a CSV export: %s; a .txt prompt file is read as one prompt per line, as written, "
        "so these are used as prompts, quotes and all: save the prompts one per line without a header or quotes",
        str(path),
        ", and ".join(found),
    )


def load_prompts(path: str | Path) -> list[PromptRecord]:
    """Load .txt or suffix-less files (a prompt per line) or .jsonl (objects with ``prompt``; GenEval lines keep their
    metadata); any other suffix is refused (a .json array or a .csv read as lines would train on its syntax)."""
    path = Path(path)
    if path.is_dir():  # it said "does not exist" of a folder that does
        raise PromptFileError(f"prompt file {str(path)!r} is a folder; give a .txt or .jsonl file")
    if not path.is_file():
        from imgalign.hub import tilde_hint

        raise PromptFileError(f"prompt file {str(path)!r} does not exist{tilde_hint(str(path))}")
    suffix = path.suffix.lower()
    if suffix not in PROMPT_SUFFIXES:
        raise PromptFileError(
            f"prompt file {str(path)!r}: unknown format {suffix!r}; give a .txt file (one prompt per line) or a .jsonl "
            "file (one JSON object with a 'prompt' field per line, e.g. GenEval's evaluation_metadata.jsonl)"
        )
    lines = _lines(path, "prompt file")
    records: list[PromptRecord] = []
    if suffix == ".jsonl":
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line, object_pairs_hook=unique_keys)
            except json.JSONDecodeError as e:
                raise _not_json(path, n, e, lines, PROMPTS_PLAIN) from None
            except DuplicateKey as e:
                raise PromptFileError(f"{path}:{n}: {e}") from None
            prompt = (
                clean_prompt(obj["prompt"])
                if isinstance(obj, dict) and isinstance(obj.get("prompt"), str)
                else ""
            )
            if not prompt:
                # another tool's name for it ({"text": ...} from a Hugging Face dataset, "Prompt", "caption")
                other = [k for k in obj if k.lower() in PROMPT_KEYS] if isinstance(obj, dict) else []
                also = (
                    ""
                    if not other or "prompt" in obj
                    else f" (the line has {other[0]!r}: rename it 'prompt')"
                )
                raise PromptFileError(f"{path}:{n}: each line needs a non-empty string field 'prompt'{also}")
            check_prompt_text(obj["prompt"], f"{path}:{n}")
            check_geneval_fields(obj, f"{path}:{n}")
            # the metadata's prompt as the record's (rewards reading metadata["prompt"] saw the spaces)
            records.append(PromptRecord(prompt, {**obj, "prompt": prompt}, n))
    else:
        json_line = next((n for n, line in enumerate(lines, start=1) if _is_json_object(line)), None)
        if json_line is not None:  # each JSON text was trained on as a prompt, without a word
            raise PromptFileError(
                f"{path}:{json_line}: the line is a JSON object, and a {suffix or 'suffix-less'} prompt file is read "
                "as one prompt per line (the JSON text would be the prompt): rename the file to .jsonl"
            )
        cleaned = [clean_prompt(line) for line in lines]
        records = [PromptRecord(p, {"prompt": p}, n) for n, p in enumerate(cleaned, start=1) if p]
        hashed = [n for n, p in enumerate(cleaned, start=1) if p.startswith("#")]
        if hashed:
            # a .txt prompt list has no comment syntax (a prompt may start with '#'), so such lines stay prompts
            logger.warning(
                "prompt file %r: %d line(s) start with '#' (first: line %d); a .txt prompt file has no comments, "
                "so they are used as prompts: delete them if they are comments",
                str(path),
                len(hashed),
                hashed[0],
            )
        _warn_if_csv_export(path, cleaned)
    if not records:
        raise PromptFileError(f"prompt file {str(path)!r} holds no prompts")
    return records
