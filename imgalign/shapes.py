"""The shapes world: structured GenEval-style specs, their prompts and metadata, and an exact renderer.

A :class:`Spec` is what a GenEval metadata line describes (a task tag, include clauses with class, count, optional
colour and optional relative position, exclude clauses for counting).  It renders to

* an image (:func:`render`), procedurally and exactly, with a layout that satisfies every clause under the GenEval
  decision rules (`eval.geneval`), and
* a GenEval-style prompt (:meth:`Spec.prompt`) and metadata line (:meth:`Spec.to_metadata`).

Vocabulary (chosen with the default-models issue so that a tiny latent model trained on 2 CPU cores can draw it):
4 shapes x 6 colours on a 64x64 dark-grey canvas; objects are 15-22 px wide, at most 4 per image, never touching.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

IMAGE_SIZE = 64
SUPERSAMPLE = 4  # render at 4x and downsample with a box filter: anti-aliased edges
BACKGROUND = (24, 24, 24)
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "cross")
PLURALS = {"circle": "circles", "square": "squares", "triangle": "triangles", "cross": "crosses"}
# Six of GenEval's ten colours, far apart in RGB and from the background.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "yellow": (235, 215, 30),
    "green": (30, 190, 50),
    "blue": (40, 80, 235),
    "purple": (160, 50, 200),
    "white": (240, 240, 240),
}
RELATIONS: tuple[str, ...] = ("left of", "right of", "above", "below")
TASKS: tuple[str, ...] = ("single_object", "two_object", "counting", "colors", "position", "color_attr")
NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four"}
MIN_SIZE, MAX_SIZE = 15, 22  # object box side in pixels at IMAGE_SIZE
MIN_GAP = 3  # pixels between object boxes
POSITION_THRESHOLD = 0.1  # GenEval's margin (shared with eval.geneval)

# Held out of the colour-bearing training prompts (`colors`, `color_attr`): the T2I model only ever sees these
# colour x shape pairs drawn under prompts that do not name the colour, so the eval set measures generalisation.
HELD_OUT_PAIRS: frozenset[tuple[str, str]] = frozenset(
    {("red", "triangle"), ("blue", "cross"), ("green", "circle"), ("yellow", "square"), ("purple", "cross")}
)


class SpecError(ValueError):
    """A spec or metadata line that names something outside the shapes world or breaks the GenEval schema."""


@dataclass(frozen=True)
class Clause:
    """One GenEval include clause: `count` objects of `shape`, optionally coloured and placed relative to another
    clause (`position = (relation, index of the target clause)`)."""

    shape: str
    count: int = 1
    color: str | None = None
    position: tuple[str, int] | None = None


@dataclass(frozen=True)
class Spec:
    """A GenEval-style task instance in the shapes world."""

    tag: str
    include: tuple[Clause, ...]
    exclude: tuple[tuple[str, int], ...] = field(default=())

    def __post_init__(self) -> None:
        validate_spec(self)

    # ---- text --------------------------------------------------------------------------------------------
    def prompt(self) -> str:
        """The GenEval-style prompt, e.g. "a photo of two red circles", "a photo of a star left of a square"."""
        if self.tag == "position":
            target, mover = self.include[0], self.include[1]
            assert mover.position is not None
            return f"a photo of {_noun_phrase(mover)} {mover.position[0]} {_noun_phrase(target)}"
        return "a photo of " + " and ".join(_noun_phrase(c) for c in self.include)

    def to_metadata(self) -> dict[str, Any]:
        """The official GenEval JSONL schema: tag, include, exclude (counting only), prompt."""
        include = []
        for c in self.include:
            d: dict[str, Any] = {"class": c.shape, "count": c.count}
            if c.color is not None:
                d["color"] = c.color
            if c.position is not None:
                d["position"] = [c.position[0], c.position[1]]
            include.append(d)
        meta: dict[str, Any] = {"tag": self.tag, "include": include}
        if self.exclude:
            meta["exclude"] = [{"class": s, "count": n} for s, n in self.exclude]
        meta["prompt"] = self.prompt()
        return meta

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> Spec:
        """Parse a GenEval metadata line (already JSON-decoded); raise :class:`SpecError` naming the bad field."""
        if not isinstance(meta, dict):
            raise SpecError(f"metadata must be a JSON object, got {type(meta).__name__}")
        if "tag" not in meta:
            raise SpecError("metadata field 'tag' is missing")
        inc = meta.get("include")
        if not isinstance(inc, list) or not inc:
            raise SpecError("metadata field 'include' must be a non-empty list")
        clauses = []
        for i, d in enumerate(inc):
            if not isinstance(d, dict) or "class" not in d:
                raise SpecError(f"include[{i}] must be an object with a 'class' field")
            pos = d.get("position")
            if pos is not None:
                if not (
                    isinstance(pos, (list, tuple))
                    and len(pos) == 2
                    and isinstance(pos[1], int)
                    and not isinstance(pos[1], bool)
                ):
                    raise SpecError(f"include[{i}].position must be [relation, target index], got {pos!r}")
                pos = (pos[0], pos[1])
            count = d.get("count", 1)
            if not isinstance(count, int) or isinstance(count, bool):
                raise SpecError(f"include[{i}].count must be an integer, got {count!r}")
            clauses.append(Clause(shape=d["class"], count=count, color=d.get("color"), position=pos))
        exc = []
        for i, d in enumerate(meta.get("exclude", []) or []):
            if not isinstance(d, dict) or "class" not in d or "count" not in d:
                raise SpecError(f"exclude[{i}] must be an object with 'class' and 'count'")
            exc.append((d["class"], d["count"]))
        spec = cls(tag=meta["tag"], include=tuple(clauses), exclude=tuple(exc))
        return spec

    @property
    def n_objects(self) -> int:
        return sum(c.count for c in self.include)


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _noun_phrase(c: Clause) -> str:
    noun = c.shape if c.count == 1 else PLURALS[c.shape]
    words = ([c.color] if c.color else []) + [noun]
    head = _article(words[0]) if c.count == 1 else NUMBERS[c.count]
    return " ".join([head, *words])


def validate_spec(spec: Spec) -> None:
    """Raise :class:`SpecError` naming the offending field if `spec` leaves the shapes vocabulary."""
    if spec.tag not in TASKS:
        raise SpecError(f"unknown tag {spec.tag!r}; valid tags: {', '.join(TASKS)}")
    for i, c in enumerate(spec.include):
        if c.shape not in SHAPES:
            raise SpecError(
                f"include[{i}].class: unknown shape {c.shape!r}; valid shapes: {', '.join(SHAPES)}"
            )
        if c.color is not None and (not isinstance(c.color, str) or c.color not in COLORS):
            raise SpecError(
                f"include[{i}].color: unknown colour {c.color!r}; valid colours: {', '.join(COLORS)}"
            )
        if not 1 <= c.count <= 4:
            raise SpecError(f"include[{i}].count must be between 1 and 4, got {c.count}")
        if c.position is not None:
            rel, idx = c.position
            if rel not in RELATIONS:
                raise SpecError(
                    f"include[{i}].position: unknown relation {rel!r}; valid: {', '.join(RELATIONS)}"
                )
            if not 0 <= idx < i:
                raise SpecError(f"include[{i}].position target {idx} must name an earlier clause")
    for i, (shape, n) in enumerate(spec.exclude):
        if shape not in SHAPES:
            raise SpecError(f"exclude[{i}].class: unknown shape {shape!r}; valid shapes: {', '.join(SHAPES)}")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise SpecError(f"exclude[{i}].count must be a positive integer, got {n!r}")
        included = sum(c.count for c in spec.include if c.shape == shape)
        if n <= included:  # GenEval's exclude fails an image with n or more: no image could pass
            raise SpecError(
                f"exclude[{i}]: {n} or more {shape}s fail the image, but include asks for {included}; the exclude "
                f"count must be above {included}"
            )
    if sum(c.count for c in spec.include) > 4:
        raise SpecError("a shapes-world image holds at most 4 objects")


# ---- constructors for the six tasks -------------------------------------------------------------------------
def single_object(shape: str) -> Spec:
    return Spec("single_object", (Clause(shape),))


def two_object(a: str, b: str) -> Spec:
    return Spec("two_object", (Clause(a), Clause(b)))


def counting(shape: str, n: int) -> Spec:
    return Spec("counting", (Clause(shape, count=n),), exclude=((shape, n + 1),))


def colors(color: str, shape: str) -> Spec:
    return Spec("colors", (Clause(shape, color=color),))


def position(mover: str, relation: str, target: str) -> Spec:
    """ "a photo of a `mover` `relation` a `target`" (GenEval lists the target first)."""
    return Spec("position", (Clause(target), Clause(mover, position=(relation, 0))))


def color_attr(c1: str, a: str, c2: str, b: str) -> Spec:
    return Spec("color_attr", (Clause(a, color=c1), Clause(b, color=c2)))


# ---- geometry shared with the judge --------------------------------------------------------------------------
def _revised_offset(box_a: tuple[float, ...], box_b: tuple[float, ...]) -> tuple[float, float]:
    """GenEval's revised centre offset of A from B as a fraction of the original offset's norm: (dx, dy), y down.

    Each axis is shrunk by 0.1 x the summed box sizes on that axis; (0, 0) when nothing is left (overlap)."""
    ax0, ay0, ax1, ay1 = box_a[:4]
    bx0, by0, bx1, by1 = box_b[:4]
    off = np.array([(ax0 + ax1) / 2 - (bx0 + bx1) / 2, (ay0 + ay1) / 2 - (by0 + by1) / 2], dtype=np.float64)
    dims = np.array([abs(ax1 - ax0) + abs(bx1 - bx0), abs(ay1 - ay0) + abs(by1 - by0)], dtype=np.float64)
    revised = np.maximum(np.abs(off) - POSITION_THRESHOLD * dims, 0) * np.sign(off)
    if np.all(np.abs(revised) < 1e-3):
        return 0.0, 0.0
    dx, dy = revised / np.linalg.norm(off)
    return float(dx), float(dy)


def relative_position(box_a: tuple[float, ...], box_b: tuple[float, ...]) -> set[str]:
    """Relations of box A to box B under GenEval's rule (boxes are x0, y0, x1, y1 with y pointing down).

    Centre offset, each axis shrunk by 0.1 x (sum of the two box sizes on that axis), divided by the norm of the
    original offset; a relation holds when its component is beyond +-0.5 (GenEval `relative_position`).
    """
    return {rel for rel in RELATIONS if relation_margin(box_a, box_b, rel) > 0.5}


def relation_margin(box_a: tuple[float, ...], box_b: tuple[float, ...], relation: str) -> float:
    """The component of A's revised offset from B along `relation` (in [-1, 1]); the relation holds when it is
    beyond 0.5 (:func:`relative_position`). A dense version of the rule, for shaped rewards."""
    dx, dy = _revised_offset(box_a, box_b)
    return {"left of": -dx, "right of": dx, "above": -dy, "below": dy}[relation]


# ---- rendering ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlacedObject:
    """An object as rendered: class, colour, and its box in pixels (x0, y0, x1, y1, exclusive ends)."""

    shape: str
    color: str
    box: tuple[int, int, int, int]
    clause: int


def shape_polygon(shape: str, x0: float, y0: float, x1: float, y1: float) -> list[tuple[float, float]] | None:
    """Polygon vertices of `shape` filling the box (None for the circle, drawn as an ellipse)."""
    w, h = x1 - x0, y1 - y0
    if shape == "square":
        return [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]
    if shape == "triangle":  # apex up
        return [(x0 + w / 2, y0), (x1, y1), (x0, y1)]
    if shape == "cross":  # a plus sign with arms one third of the box wide
        a, b = x0 + w / 3, x0 + 2 * w / 3
        c, d = y0 + h / 3, y0 + 2 * h / 3
        return [
            (a, y0),
            (b, y0),
            (b, c),
            (x1, c),
            (x1, d),
            (b, d),
            (b, y1),
            (a, y1),
            (a, d),
            (x0, d),
            (x0, c),
            (a, c),
        ]
    if shape == "circle":
        return None
    raise SpecError(f"unknown shape {shape!r}; valid shapes: {', '.join(SHAPES)}")


def draw_shape(draw: ImageDraw.ImageDraw, shape: str, box: tuple[float, float, float, float], fill) -> None:
    poly = shape_polygon(shape, *box)
    if poly is None:
        draw.ellipse(box, fill=fill)
    else:
        draw.polygon(poly, fill=fill)


def shape_mask(shape: str, w: int, h: int, supersample: int = SUPERSAMPLE) -> np.ndarray:
    """A float mask (h, w) in [0, 1] of `shape` filling a w x h box, anti-aliased as the renderer draws it."""
    img = Image.new("L", (w * supersample, h * supersample), 0)
    draw_shape(ImageDraw.Draw(img), shape, (0, 0, w * supersample - 1, h * supersample - 1), 255)
    img = img.resize((w, h), Image.Resampling.BOX)
    return np.asarray(img, dtype=np.float32) / 255.0


def _boxes_clear(box: tuple[int, int, int, int], others: list[tuple[int, int, int, int]]) -> bool:
    x0, y0, x1, y1 = box
    for ox0, oy0, ox1, oy1 in others:
        if x0 < ox1 + MIN_GAP and ox0 < x1 + MIN_GAP and y0 < oy1 + MIN_GAP and oy0 < y1 + MIN_GAP:
            return False
    return True


def layout(spec: Spec, rng: random.Random, max_tries: int = 2000) -> list[PlacedObject]:
    """Choose colours, sizes and non-touching places for every object so that each clause holds (GenEval rules)."""
    for _ in range(max_tries):
        objs: list[PlacedObject] = []
        ok = True
        for ci, clause in enumerate(spec.include):
            for _k in range(clause.count):
                color = clause.color or rng.choice(list(COLORS))
                placed = False
                for _t in range(60):
                    s = rng.randint(MIN_SIZE, MAX_SIZE)
                    x0 = rng.randint(1, IMAGE_SIZE - s - 1)
                    y0 = rng.randint(1, IMAGE_SIZE - s - 1)
                    box = (x0, y0, x0 + s, y0 + s)
                    if not _boxes_clear(box, [o.box for o in objs]):
                        continue
                    if clause.position is not None:
                        rel, ti = clause.position
                        targets = [o for o in objs if o.clause == ti]
                        if not all(_clear_relation(box, t.box, rel) for t in targets):
                            continue
                    objs.append(PlacedObject(clause.shape, color, box, ci))
                    placed = True
                    break
                if not placed:
                    ok = False
                    break
            if not ok:
                break
        if ok:
            return objs
    raise RuntimeError(f"could not lay out {spec.prompt()!r} after {max_tries} tries")


def _clear_relation(box: tuple[int, ...], target: tuple[int, ...], rel: str) -> bool:
    """The relation holds with room to spare: also for the box grown or shrunk by one pixel on each side."""
    rels = relative_position(box, target)
    if rel not in rels:
        return False
    # demand a margin so that anti-aliasing or a one-pixel box error cannot flip the decision
    shrunk = tuple(v + d for v, d in zip(box, (1, 1, -1, -1)))
    grown = tuple(v + d for v, d in zip(box, (-1, -1, 1, 1)))
    return rel in relative_position(shrunk, target) and rel in relative_position(grown, target)


def draw_objects(objs: list[PlacedObject], size: int = IMAGE_SIZE) -> Image.Image:
    """Draw placed objects on the background, super-sampled and box-filtered down to `size`."""
    if size < 1:
        raise ValueError(f"an image size must be at least 1 pixel (got {size})")
    # below size 16 the factor was 0: a 0x0 canvas, and every object vanished from the image without a word
    ss = max(1, SUPERSAMPLE * size // IMAGE_SIZE)
    img = Image.new("RGB", (IMAGE_SIZE * ss, IMAGE_SIZE * ss), BACKGROUND)
    draw = ImageDraw.Draw(img)
    for o in objs:
        x0, y0, x1, y1 = (v * ss for v in o.box)
        draw_shape(draw, o.shape, (x0, y0, x1 - 1, y1 - 1), COLORS[o.color])
    return img.resize((size, size), Image.Resampling.BOX)


def render(spec: Spec, seed: int | random.Random = 0) -> tuple[Image.Image, list[PlacedObject]]:
    """Render `spec` to a 64x64 RGB image; returns the image and the placed objects (ground-truth boxes)."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    objs = layout(spec, rng)
    return draw_objects(objs), objs


def render_tensor(specs: list[Spec], seed: int = 0):
    """Render a batch to a float tensor [B, 3, 64, 64] in [0, 1] (the reward contract's image format)."""
    import torch

    if not specs:
        raise ValueError("render_tensor needs at least one Spec (got none)")
    rng = random.Random(seed)
    arrs = [np.asarray(render(s, rng)[0], dtype=np.float32) / 255.0 for s in specs]
    return torch.from_numpy(np.stack(arrs)).permute(0, 3, 1, 2).contiguous()


def palette_distance(rgb: np.ndarray) -> np.ndarray:
    """Euclidean RGB distance of pixels (..., 3) to each palette colour then the background: (..., 7)."""
    pal = np.array([*COLORS.values(), BACKGROUND], dtype=np.float32)
    return np.linalg.norm(rgb[..., None, :].astype(np.float32) - pal, axis=-1)
