"""The docs' cheap facts: every training-config key, command-line option and repository path that README.md,
examples/README.md and docs/shapes_world.md name exists (round 36l's docs audit)."""

import argparse
import re
from pathlib import Path

import pytest

from imgalign.cli import build_parser
from imgalign.config import describe
from imgalign.trainers.config import FlowGRPOConfig

REPO = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "examples/README.md", "docs/shapes_world.md"]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)


def _spans(doc: str) -> list[str]:
    """Inline code spans (a span may run over a line break, as markdown allows) and the lines of fenced blocks."""
    text = (REPO / doc).read_text()
    blocks = FENCE.findall(text)
    rest = FENCE.sub("", text)
    spans = [s.replace("\n", " ") for s in re.findall(r"`([^`]+)`", rest)]
    return spans + [line for block in blocks for line in block.splitlines()]


def test_spans_are_found():
    """The extraction itself: README.md's command table and the shapes world's commands are seen."""
    assert any(s.startswith("imgalign world render --prompts") for s in _spans("README.md"))
    assert any(
        s.startswith("imgalign eval --suite shapes --images renders/") for s in _spans("docs/shapes_world.md")
    )


def _config_keys() -> set[str]:
    return {key for key, _, _ in describe(FlowGRPOConfig)}


@pytest.mark.parametrize("doc", DOCS)
def test_every_config_key_named_exists(doc):
    keys = _config_keys()
    sections = sorted({k.split(".")[0] for k in keys})
    alt = "|".join(sections)
    pattern = re.compile(rf"(?<![\w/.-])((?:{alt})(?:\.[a-z_][a-z0-9_]*)+(?:\.\*)?|(?:{alt})\.\*)")
    named = set()
    for span in _spans(doc):
        for key in pattern.findall(span):
            if re.search(r"\.(jsonl|png|json|md|yaml|py)$", key):  # eval.jsonl, eval.png: files, not keys
                continue
            named.add(key)
    missing = [
        k
        for k in sorted(named)
        if not (k in keys or (k.endswith(".*") and any(x.startswith(k[:-1]) for x in keys)))
    ]
    assert not missing, f"{doc} names config keys the schema lacks: {missing}"
    if doc != "docs/shapes_world.md":
        assert named, f"no config key found in {doc}"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command_options(words: list[str]) -> tuple[str, set[str]]:
    """The sub-command that `words` (after `imgalign`) name, and the options its parser takes."""
    parser, path = build_parser(), []
    for word in words:
        choices = _subparsers(parser)
        if word not in choices:
            break
        parser, path = choices[word], [*path, word]
    return " ".join(path), {o for a in parser._actions for o in a.option_strings}


@pytest.mark.parametrize("doc", DOCS)
def test_every_option_shown_exists(doc):
    shown = 0
    wrong = []
    for span in _spans(doc):
        for m in re.finditer(r"(?:^|[\s(])imgalign ((?:[a-z][a-z-]* ?){1,2})(.*?)(?=$|;|\bimgalign\b)", span):
            words = m.group(1).split()
            command, options = _command_options(words)
            if not command:
                continue
            for opt in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", m.group(0)):
                shown += 1
                if opt not in options:
                    wrong.append(f"imgalign {command} {opt}")
    assert not wrong, f"{doc} shows options that --help lacks: {wrong}"
    assert shown, f"no imgalign option found in {doc}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_repository_path_named_exists(doc):
    """Concrete paths in code spans (no placeholder such as RUN, DIR, NAME, CONFIG) and the targets of links and
    images exist from the repository root or from the doc's own folder."""
    base = (REPO / doc).parent
    named = set()
    for span in _spans(doc):
        for path in re.findall(
            r"(?<![\w/.=-])((?:[a-z0-9_.-]+/)+[\w.*-]*\.(?:py|yaml|jsonl|png|md|json))\b", span
        ):
            if not re.search(r"[A-Z]|^runs/|^\.venv", path):
                named.add(path)
    for link in re.findall(r"\]\(([^)#\s]+)\)", (REPO / doc).read_text()):
        if not link.startswith(("http:", "https:")):
            named.add(link)
    missing = [p for p in sorted(named) if not (list(REPO.glob(p)) or list(base.glob(p)))]
    assert not missing, f"{doc} names paths that do not exist: {missing}"
    assert named, f"no repository path found in {doc}"


def test_quickstart_test_command_is_what_ci_runs_and_its_markers_are_declared():
    """README's quickstart test command is the one .ci/run runs, and every marker it deselects is declared in
    pyproject.toml (an undeclared marker would select nothing and deselect nothing, silently)."""
    readme = (REPO / "README.md").read_text()
    command = re.search(r'^python3 -m venv .*pytest -m "([^"]+)"$', readme, re.M)
    assert command, "README.md's quickstart has no pytest -m command"
    assert command.group(0) in (REPO / ".ci" / "run").read_text()
    pyproject = (REPO / "pyproject.toml").read_text()
    declared = set(re.findall(r'"(\w+): ', re.search(r"^markers = \[(.*)\]$", pyproject, re.M).group(1)))
    used = set(re.findall(r"not (\w+)", command.group(1)))
    assert used == {"slow", "gpu"} and used <= declared, (used, declared)
