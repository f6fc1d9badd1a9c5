"""Round 23 mutation survivors in trainers/prompting.py and prompts/io.py: a generate:SEED source is no file, and
the seeded split and per-step walk of a prompt file are pinned, and a BOM inside a .jsonl is dropped."""

from __future__ import annotations

import json

from imgalign.prompts.io import load_geneval_metadata, load_prompts
from imgalign.trainers.config import PromptConfig
from imgalign.trainers.prompting import PromptSampler, check_prompt_source


def test_a_generated_prompt_set_and_the_shapes_world_are_no_files_to_look_for(tmp_path, monkeypatch):
    """generate:SEED (GenEval-style prompts drawn from the task definitions) and 'shapes' name no file: the check
    passes them, in a working folder holding no such file, instead of saying they do not exist."""
    monkeypatch.chdir(tmp_path)
    check_prompt_source("generate:0")
    check_prompt_source("generate:17")
    check_prompt_source("shapes")


def test_the_split_and_the_walk_of_a_prompt_file_are_pinned(tmp_path):
    """The held-out prompts and the per-step walk are pure functions of prompts.seed: pinned, since a change would
    give a run resumed from an older checkpoint other test prompts (some it had trained on) and another sequence.
    Step 1 crosses into the second epoch of the 7 training prompts (its last prompt starts a new permutation)."""
    f = tmp_path / "p.txt"
    f.write_text("".join(f"prompt {i}\n" for i in range(10)))
    s = PromptSampler(PromptConfig(source=str(f), test_fraction=0.3, seed=0))
    assert [p for p, _ in s.test] == ["prompt 7", "prompt 8", "prompt 1"]
    assert s.for_step(0, 4).prompts == ["prompt 4", "prompt 3", "prompt 5", "prompt 2"]
    assert s.for_step(1, 4).prompts == ["prompt 6", "prompt 9", "prompt 0", "prompt 5"]


def test_the_shapes_prompts_of_a_step_are_pinned_to_the_seed_and_the_step():
    """A shapes step draws from _mix(prompts.seed, step): pinned, with the seed and the step apart (seed 0 at step 5
    is not seed 5 at step 0), as a resumed run and every process must draw the same prompts."""
    assert PromptSampler(PromptConfig(source="shapes", seed=0)).for_step(5, 2).prompts == [
        "a photo of a triangle",
        "a photo of a green triangle and a yellow circle",
    ]
    assert PromptSampler(PromptConfig(source="shapes", seed=3)).for_step(0, 2).prompts == [
        "a photo of a yellow triangle",
        "a photo of a white circle and a white square",
    ]


def test_a_bom_at_the_start_of_a_later_jsonl_line_is_dropped(tmp_path):
    """Two .jsonl files saved with a BOM and joined with cat hold one at the start of the second file's first line:
    the line is read as JSON, by the prompt and the GenEval metadata readers alike, not refused as "not valid JSON"."""

    def line(name: str) -> str:
        clause = {"class": name, "count": 1}
        return "\ufeff" + json.dumps(
            {"tag": "single_object", "include": [clause], "prompt": f"a photo of a {name}"}
        )

    f = tmp_path / "joined.jsonl"
    f.write_bytes((line("cat") + "\n" + line("dog") + "\n").encode("utf-8"))
    records = load_prompts(f)
    assert [(r.prompt, r.line) for r in records] == [("a photo of a cat", 1), ("a photo of a dog", 2)]
    assert [m["prompt"] for m in load_geneval_metadata(f)] == ["a photo of a cat", "a photo of a dog"]
