"""The GenEval decision rules, independent of the detector (Ghosh et al., 2023; `algorithms.md` section 7).

A detector (the classical shapes detector in :mod:`imgalign.eval.shapes_detector`, or a neural detector for real
models) produces raw :class:`Detection` lists per class; this module applies GenEval's thresholds and its include /
exclude / colour / position rules exactly as the official `evaluate_images.py` does:

* confidence > 0.3 (> 0.9 on `counting` prompts), highest first, at most 16 per class, no NMS;
* include clause: the top-`count` detections must exist; colour: at least `count` of them classified as the colour;
  position: every found object against every object of the target clause, relation beyond +-0.5 after shrinking the
  centre offset by 0.1 x the summed box sizes (y down); a clause whose target failed fails;
* exclude clause: fail if >= `count` detections;
* task score = share of correct images, overall = plain mean of the task scores.

The partial-credit variant (an RL reward) averages 1 - |count - found| / count over clauses; a failed position is
worth 0 for that clause only (the reference server's double-count bug is not repeated). The dense variant
(:func:`soft_credit`) replaces each of the rules' thresholds by a ramp, so that near misses earn part of a clause.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from imgalign.shapes import relation_margin, relative_position

THRESHOLD = 0.3
COUNTING_THRESHOLD = 0.9
MAX_OBJECTS = 16
# the official evaluator's colour classifier (open_clip ARCH:PRETRAINED)
GENEVAL_CLIP = "ViT-L-14:openai"
GENEVAL_COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white")


@dataclass
class Detection:
    """One detected object: box (x0, y0, x1, y1) in pixels, confidence, optional mask and colour.

    `color` is filled by detectors that know it (the shapes detector segments by colour); otherwise a colour
    classifier (`ColorFn`) is asked."""

    box: tuple[float, float, float, float]
    score: float
    mask: np.ndarray | None = None
    color: str | None = None
    class_scores: dict[str, float] | None = None  # the same object's confidence as every class, where known


Detections = dict[str, list[Detection]]
# color_fn(image, detections of one class, class name) -> one colour name per detection
ColorFn = Callable[[Any, Sequence[Detection], str], list[str]]


def color_from_detection(image: Any, dets: Sequence[Detection], classname: str) -> list[str]:
    """The colour function for detectors that attach a colour to each detection."""
    return [d.color or "" for d in dets]


def filter_detections(raw: Detections, tag: str) -> Detections:
    """GenEval's selection: score above the task's threshold, sorted high to low, at most 16 per class (no NMS)."""
    thr = COUNTING_THRESHOLD if tag == "counting" else THRESHOLD
    out: Detections = {}
    for cls, dets in raw.items():
        kept = sorted((d for d in dets if d.score > thr), key=lambda d: -d.score)[:MAX_OBJECTS]
        if kept:
            out[cls] = kept
    return out


@dataclass
class Judgement:
    correct: bool
    reason: str
    partial: float


def evaluate(image: Any, objects: Detections, metadata: dict[str, Any], color_fn: ColorFn) -> Judgement:
    """Judge one image from its *filtered* detections against a GenEval metadata line."""
    correct = True
    reasons: list[str] = []
    clause_credit: list[float] = []
    matched_groups: list[list[Detection] | None] = []
    exclude_classes = {e["class"] for e in metadata.get("exclude", []) or []}
    for req in metadata.get("include", []):
        cls, count = req["class"], req["count"]
        matched = True
        found = objects.get(cls, [])[:count]
        n_good = len(found)
        if len(found) < count:
            correct = matched = False
            reasons.append(f"expected {cls}>={count}, found {len(found)}")
        else:
            if "color" in req:
                colors = color_fn(image, found, cls)
                n_good = colors.count(req["color"])
                if n_good < count:
                    correct = matched = False
                    seen = ", ".join(f"{colors.count(c)} {c}" for c in GENEVAL_COLORS if c in colors)
                    reasons.append(
                        f"expected {req['color']} {cls}>={count}, found {n_good} {req['color']}; and {seen}"
                    )
            if "position" in req and matched:
                rel, target = req["position"]
                if target >= len(matched_groups) or matched_groups[target] is None:
                    correct = matched = False
                    n_good = 0
                    reasons.append(f"no target for {cls} to be {rel}")
                else:
                    n_good = 0
                    for obj in found:
                        ok = True
                        for tobj in matched_groups[target]:
                            true_rels = relative_position(obj.box, tobj.box)
                            if rel not in true_rels:
                                ok = False
                                if matched:
                                    rels = " and ".join(sorted(true_rels)) or "overlapping"
                                    reasons.append(f"expected {cls} {rel} target, found {rels} target")
                                correct = matched = False
                                break
                        n_good += ok
        # partial credit: for counting clauses (paired with an exclude) `found` is every detection of the class
        if cls in exclude_classes:
            n_all = len(objects.get(cls, []))
            clause_credit.append(max(0.0, 1.0 - abs(count - n_all) / count))
        else:
            clause_credit.append(max(0.0, 1.0 - abs(count - n_good) / count))
        matched_groups.append(found if matched else None)
    for req in metadata.get("exclude", []) or []:
        cls = req["class"]
        n = len(objects.get(cls, []))
        if n >= req["count"]:
            correct = False
            reasons.append(f"expected {cls}<{req['count']}, found {n}")
        if cls not in {r["class"] for r in metadata.get("include", [])}:
            clause_credit.append(0.0 if n >= req["count"] else 1.0)
    partial = float(np.mean(clause_credit)) if clause_credit else float(correct)
    return Judgement(
        correct=correct, reason="\n".join(reasons), partial=1.0 if correct else min(partial, 1.0)
    )


def _ramp(x: float, at: float) -> float:
    """0 at x <= 0, rising linearly to 1 at x >= `at`."""
    return float(min(max(x / at, 0.0), 1.0))


def soft_credit(
    image: Any,
    raw: Detections,
    metadata: dict[str, Any],
    color_fn: ColorFn = color_from_detection,
    passed: bool | None = None,
) -> float:
    """Dense partial credit from *raw* (unfiltered) detections: the partial-credit rule with each threshold a ramp.

    Every detected object earns a weight in [0, 1] toward a clause: its confidence as the clause's class over the
    task's threshold (min(1, score / 0.3), or / 0.9 on counting prompts; an object detected as another class earns
    half its confidence as the clause's class where the detector reports it in `Detection.class_scores`), times 0
    for the wrong colour, times, for a position clause, the worst over the target clause's objects of min(1, margin /
    0.5), where margin is the relation's component of GenEval's revised offset (the rule needs > 0.5). A clause scores
    the sum of its `count` best weights over `count` (an object serves one clause: the earlier clause keeps it); on
    counting prompts the further objects detected as the class count against (so with 0/1 weights this is the partial
    credit's 1 - |count - found| / count). A class that must be absent scores 1 - min(1, sum of its confidences /
    count). The mean over clauses; an image the strict rules pass scores 1. Near misses (a ragged or wrong shape, a
    slightly misplaced object) so earn part of a clause instead of nothing, which gives a group of samples more
    distinct rewards to rank.

    `passed`: the strict verdict when the caller already has it (``judge(...).correct``), so the rules run once.
    """
    if passed is None:
        passed = judge(image, raw, metadata, color_fn).correct
    if passed:
        return 1.0
    thr = COUNTING_THRESHOLD if metadata.get("tag") == "counting" else THRESHOLD
    exclude_count = {e["class"]: e["count"] for e in metadata.get("exclude", []) or []}
    objects = [
        (cls, d) for cls, dets in raw.items() for d in sorted(dets, key=lambda d: -d.score)[:MAX_OBJECTS]
    ]
    taken: set[int] = set()
    credit: list[float] = []
    # each include clause's best `count` objects (the targets of later position clauses)
    groups: list[list[Detection]] = []
    for req in metadata.get("include", []):
        cls, count = req["class"], req["count"]
        free = [i for i in range(len(objects)) if i not in taken]
        dets = [objects[i][1] for i in free]
        colors = color_fn(image, dets, cls) if "color" in req and dets else []
        weights = []
        for k, i in enumerate(free):
            own, det = objects[i]
            if own == cls:
                w = _ramp(det.score, thr)
            else:  # a near miss detected as another class earns at most half
                w = 0.5 * _ramp(det.class_scores.get(cls, 0.0), thr) if det.class_scores else 0.0
            if "color" in req and colors[k] != req["color"]:
                w = 0.0
            if "position" in req:
                rel, target = req["position"]
                targets = groups[target] if target < len(groups) else []
                w *= min((_ramp(relation_margin(det.box, t.box, rel), 0.5) for t in targets), default=0.0)
            weights.append(w)
        order = sorted(range(len(free)), key=lambda k: -weights[k])
        best = [k for k in order[:count] if weights[k] > 0]
        taken.update(free[k] for k in best)
        groups.append([dets[k] for k in best])
        c = sum(weights[k] for k in best) / count
        if cls in exclude_count:  # counting: every further object detected as the class counts against
            c -= (
                sum(_ramp(objects[i][1].score, thr) for i in free if i not in taken and objects[i][0] == cls)
                / count
            )
        credit.append(max(c, 0.0))
    included = {r["class"] for r in metadata.get("include", [])}
    for cls, count in exclude_count.items():
        if cls not in included:
            credit.append(1.0 - min(1.0, sum(_ramp(d.score, thr) for d in raw.get(cls, [])) / count))
    soft = float(np.mean(credit)) if credit else 0.0
    return min(soft, 1.0)


def judge(
    image: Any, raw: Detections, metadata: dict[str, Any], color_fn: ColorFn = color_from_detection
) -> Judgement:
    """Filter raw detections with GenEval's thresholds, then :func:`evaluate`."""
    return evaluate(image, filter_detections(raw, metadata.get("tag", "")), metadata, color_fn)


def summarize(rows: Sequence[dict[str, Any]]) -> tuple[float, dict[str, float]]:
    """Task score = share of correct images per tag; overall = plain mean over tags (GenEval's summary)."""
    by_tag: dict[str, list[bool]] = {}
    for r in rows:
        by_tag.setdefault(r["tag"], []).append(bool(r["correct"]))
    tasks = {t: float(np.mean(v)) for t, v in sorted(by_tag.items())}
    overall = float(np.mean(list(tasks.values()))) if tasks else 0.0
    return overall, tasks
