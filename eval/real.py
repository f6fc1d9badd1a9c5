"""GenEval for real text-to-image models, in-process on current libraries (Ghosh et al., 2023; `algorithms.md` 7).

The official evaluator needs mmdet 2.x on torch 1.12; this suite swaps in detectors that `transformers` loads and
keeps everything else: the prompt format, the folder layout (:mod:`imgalign.eval.suite`), and the decision rules,
thresholds and scores (:mod:`imgalign.eval.geneval`, shared with the shapes suite).

* Prompts: the official ``evaluation_metadata.jsonl`` (:func:`imgalign.prompts.io.load_geneval_metadata`), or
  :func:`generate_metadata`, which follows the published task definitions (80 COCO classes, 10 colours, counts 2-4,
  four relations). Scores are comparable with published GenEval numbers **only on the official file**.
* Detection: :class:`HFDetector` wraps a closed-set COCO detector (DETR family via ``AutoModelForObjectDetection``;
  Mask2Former / MaskFormer instance segmentation, whose masks are kept) or a zero-shot detector queried with the
  class names (OWL-ViT, OWLv2, Grounding DINO). The official detector is Mask2Former (Swin-S, COCO).
* Colour: :class:`ClipColorClassifier`, open_clip zero-shot over GenEval's 10 colours with its three templates, the
  object pasted on #999 grey when the detector gives a mask (otherwise the original pixels) and cropped to its box --
  as the official ``ImageCrops``. The official CLIP is ``ViT-L-14`` with OpenAI weights.

Absolute scores depend on the detector: only Mask2Former-COCO + ViT-L-14 reproduces the official setup (up to
mmdet-vs-transformers numerics); other detectors give comparable *deltas* between models, not paper numbers.

Usage (the command line, once ``imgalign eval`` has the geneval suite)::

    imgalign eval --suite geneval --model BASE[+OVERLAY] --prompts evaluation_metadata.jsonl \
        --detector facebook/mask2former-swin-small-coco-instance --clip ViT-L-14:openai --device cuda --out DIR
    imgalign eval --suite geneval --images DIR/images --detector ... --out DIR2 --baseline DIR

or in Python: ``generate_folder(load_pipeline(spec), metas, DIR, 4, 0, sample=generate_images)``
(:mod:`imgalign.pipelines`, :mod:`imgalign.sampling`), then
``evaluate_folder(DIR, OUT, detector, clip)``; ``generate_metadata(seed)`` draws a fresh prompt set.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from imgalign.eval.geneval import GENEVAL_CLIP, GENEVAL_COLORS, ColorFn, Detection, Detections
from imgalign.rewards.base import did_you_mean

log = logging.getLogger(__name__)

# The 80 COCO classes under GenEval's names (its object_names.txt), in COCO order.
COCO_CLASSES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "computer mouse", "tv remote",
    "computer keyboard", "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock",
    "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip
RELATIONS = ("left of", "right of", "above", "below")
COUNT_WORDS = {2: "two", 3: "three", 4: "four"}
# Label spellings used by detector checkpoints (COCO / VOC conventions) -> GenEval's class names.
LABEL_ALIASES = {
    "mouse": "computer mouse",
    "remote": "tv remote",
    "keyboard": "computer keyboard",
    "tvmonitor": "tv",
    "tv monitor": "tv",
    "motorbike": "motorcycle",
    "aeroplane": "airplane",
    "sofa": "couch",
    "diningtable": "dining table",
    "pottedplant": "potted plant",
    "hair dryer": "hair drier",
    "cellphone": "cell phone",
    "doughnut": "donut",
    "television": "tv",
    "hotdog": "hot dog",
    "mobile phone": "cell phone",
    "teddybear": "teddy bear",
    "hairdrier": "hair drier",
}
TASK_SIZES = {
    "single_object": 80,
    "two_object": 99,
    "counting": 80,
    "colors": 94,
    "position": 100,
    "color_attr": 100,
}  # the official file's task sizes
COLOR_TEMPLATES = ("a photo of a {c} {obj}", "a photo of a {c}-colored {obj}", "a photo of a {c} object")
GREY = "#999"


# ---- prompts ------------------------------------------------------------------------------------------------
def with_article(name: str) -> str:
    """GenEval's article rule: "an" before a vowel letter."""
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def make_plural(name: str) -> str:
    """GenEval's plural rule ("buses", "benchs", "sheeps"): +es after s, else +s."""
    return f"{name}es" if name.endswith("s") else f"{name}s"


def prompt_for(meta: dict[str, Any]) -> str:
    """GenEval's wording of a metadata line (reproduces every prompt of the official file)."""
    inc = meta["include"]

    def noun(c: dict[str, Any]) -> str:
        return with_article(f"{c['color']} {c['class']}" if "color" in c else c["class"])

    tag = meta["tag"]
    if tag in ("single_object", "colors"):
        return f"a photo of {noun(inc[0])}"
    if tag in ("two_object", "color_attr"):
        return f"a photo of {noun(inc[0])} and {noun(inc[1])}"
    if tag == "counting":
        return f"a photo of {COUNT_WORDS[inc[0]['count']]} {make_plural(inc[0]['class'])}"
    if tag == "position":
        return f"a photo of {noun(inc[1])} {inc[1]['position'][0]} {noun(inc[0])}"
    raise ValueError(f"unknown GenEval task {tag!r}; tasks: {', '.join(TASK_SIZES)}")


def generate_metadata(
    seed: int = 0,
    sizes: dict[str, int] | None = None,
    classes: Sequence[str] = COCO_CLASSES,
    colors: Sequence[str] = GENEVAL_COLORS,
) -> list[dict[str, Any]]:
    """A GenEval-format prompt set drawn from the published task definitions.

    Tasks: single_object (each class once, then repeats), two_object (two distinct classes), counting (one class,
    count 2-4, with the exclude clause count+1), colors (one class, one colour), position (two distinct classes,
    one of the four relations; clause 1 is placed relative to clause 0), color_attr (two distinct classes with two
    distinct colours). Prompts are worded as GenEval words them (:func:`prompt_for`). The draws differ from the
    official file, so scores on this set are **not** comparable with published GenEval numbers; use the official
    file for that."""
    sizes = dict(TASK_SIZES if sizes is None else sizes)
    unknown = set(sizes) - set(TASK_SIZES)
    if unknown:
        raise ValueError(f"unknown GenEval task(s) {sorted(unknown)}; tasks: {', '.join(TASK_SIZES)}")
    if len(classes) < 2 or len(colors) < 2:
        raise ValueError("generate_metadata needs at least 2 classes and 2 colours")
    rng = np.random.default_rng(seed)

    def pick(pool: Sequence[str], k: int) -> list[str]:
        return [pool[i] for i in rng.choice(len(pool), size=k, replace=False)]

    def one(cls: str, **extra: Any) -> dict[str, Any]:
        return {"class": cls, "count": 1, **extra}

    metas: list[dict[str, Any]] = []
    for i in range(sizes.get("single_object", 0)):
        metas.append({"tag": "single_object", "include": [one(classes[i % len(classes)])]})
    for _ in range(sizes.get("two_object", 0)):
        a, b = pick(classes, 2)
        metas.append({"tag": "two_object", "include": [one(a), one(b)]})
    for _ in range(sizes.get("counting", 0)):
        (cls,) = pick(classes, 1)
        n = int(rng.integers(2, 5))
        metas.append(
            {
                "tag": "counting",
                "include": [{"class": cls, "count": n}],
                "exclude": [{"class": cls, "count": n + 1}],
            }
        )
    for _ in range(sizes.get("colors", 0)):
        (cls,), (color,) = pick(classes, 1), pick(colors, 1)
        metas.append({"tag": "colors", "include": [one(cls, color=color)]})
    for _ in range(sizes.get("position", 0)):
        target, obj = pick(classes, 2)
        (rel,) = pick(RELATIONS, 1)
        metas.append({"tag": "position", "include": [one(target), one(obj, position=[rel, 0])]})
    for _ in range(sizes.get("color_attr", 0)):
        a, b = pick(classes, 2)
        ca, cb = pick(colors, 2)
        metas.append({"tag": "color_attr", "include": [one(a, color=ca), one(b, color=cb)]})
    for m in metas:
        m["prompt"] = prompt_for(m)
    return metas


def generate_seed(spec: str) -> int:
    """The seed of a ``generate:SEED`` prompt set; a ValueError naming `spec` when SEED is not 0 or more in digits."""
    text = spec.split(":", 1)[1]
    if text.startswith("-") and text[1:].isascii() and text[1:].isdigit():
        raise ValueError(f"prompt set {spec!r}: the seed of generate:SEED must be 0 or more")
    # digits only: int() also took "generate: 5" and "generate:1_0" (seed 10), each another spelling of a set
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"prompt set {spec!r}: expected generate:SEED with an integer seed (digits only)")
    return int(text)


def load_prompt_set(spec: str) -> list[dict[str, Any]]:
    """A GenEval metadata file, or ``generate:SEED`` for :func:`generate_metadata` (553 prompts in the official
    task sizes; not comparable with published numbers)."""
    from imgalign.prompts.io import load_geneval_metadata

    if spec.startswith("generate:"):
        seed = generate_seed(spec)
        log.warning("generated GenEval-style prompts: scores are comparable only with runs on this same set")
        return generate_metadata(seed)
    return load_geneval_metadata(spec)


def clause_lists(meta: dict[str, Any]) -> list[tuple[str, Any]]:
    """(field, value) of a metadata row's include and exclude clause lists (an absent or null exclude: none)."""
    return [("include", meta.get("include", [])), ("exclude", meta.get("exclude") or [])]


def metadata_classes(metas: Sequence[dict[str, Any]]) -> list[str]:
    """Every class named by a prompt set (include and exclude clauses), sorted. A clause without a class name (a
    hand-made folder's metadata) names none: :func:`validate_real_metadata` refuses its prompt."""
    names = {
        c["class"]
        for m in metas
        for _, clauses in clause_lists(m)
        if isinstance(clauses, list)
        for c in clauses
        if isinstance(c, dict) and isinstance(c.get("class"), str)
    }
    return sorted(names)


def check_clauses(meta: dict[str, Any]) -> None:
    """Raise ValueError naming the field when the include or exclude clauses are not a list of objects with a
    string 'class' (metadata of an --images folder is read as it is: a clause without one stopped the whole
    evaluation with "error: class", and 'include' as a string with a TypeError traceback)."""
    for key, clauses in clause_lists(meta):
        if not isinstance(clauses, list):
            raise ValueError(
                f'{key!r} is {clauses!r}; it must be a list of clauses such as {{"class": "cat", "count": 1}}'
            )
        for i, c in enumerate(clauses):
            if not isinstance(c, dict) or not isinstance(c.get("class"), str):
                raise ValueError(
                    f"{key}[{i}] is {c!r}; each clause needs a 'class' naming the object (e.g. \"cat\")"
                )


def validate_real_metadata(meta: dict[str, Any], classes: Sequence[str]) -> None:
    """Raise ValueError when a prompt's clauses are malformed (:func:`check_clauses`), or it names a class the
    detector cannot find or a colour outside GenEval's 10."""
    check_clauses(meta)
    for c in list(meta.get("include", [])) + list(meta.get("exclude") or []):
        if c["class"] not in classes:
            raise ValueError(
                f"class {c['class']!r} is not one the detector can find{did_you_mean(c['class'], classes)}; use "
                "GenEval's COCO class names (imgalign.eval.real.COCO_CLASSES) or a zero-shot detector"
            )
        if "color" in c and c["color"] not in GENEVAL_COLORS:
            raise ValueError(
                f"colour {c['color']!r} is not one of GenEval's {', '.join(GENEVAL_COLORS)}"
                f"{did_you_mean(c['color'], GENEVAL_COLORS)}"
            )


# ---- detection ----------------------------------------------------------------------------------------------
ZERO_SHOT_TYPES = ("owlvit", "owlv2", "grounding-dino", "mm-grounding-dino")
INSTANCE_SEG_TYPES = ("mask2former", "maskformer")


def canonical_label(label: str, classes: Sequence[str]) -> str | None:
    """A detector's label spelling -> GenEval class name, or None when it is not one of `classes`."""
    s = re.sub(r"[\s_-]+", " ", label.strip().lower())  # "dining-table", "Potted_Plant" -> spaces
    s = LABEL_ALIASES.get(s, s)
    return s if s in classes else None


def cxcywh_to_pixels(boxes: torch.Tensor, size_hw: tuple[int, int]) -> torch.Tensor:
    """[N, 4] normalised (cx, cy, w, h) -> [N, 4] pixel (x0, y0, x1, y1) in an image of `size_hw` (H, W)."""
    h, w = size_hw
    cx, cy, bw, bh = boxes.unbind(-1)
    return torch.stack([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h], dim=-1)


def box_nms(boxes: torch.Tensor, scores: torch.Tensor, iou: float) -> torch.Tensor:
    """Indices kept by greedy non-maximum suppression at `iou` (boxes [N, 4] x0 y0 x1 y1), highest score first."""
    from torchvision.ops import nms

    return nms(boxes.float(), scores.float(), iou)


class HFDetector:
    """Callable: PIL image -> raw :data:`Detections` per GenEval class name, from a transformers checkpoint.

    `model`: a local folder saved with ``save_pretrained`` or a Hub id already in the local cache. Closed-set
    detectors report the classes their ``id2label`` names (COCO spellings mapped by :data:`LABEL_ALIASES`);
    zero-shot detectors are queried with ``template.format(class)`` for each of `classes` (Grounding DINO with the
    bare names), and each predicted box takes its best-scoring class, so one object never counts as two classes.
    `nms_iou`: per-class NMS applied as the detector's own post-processing (default 0.3 for OWL models, which
    predict one box per image patch and so repeat every object; none for set predictors such as DETR,
    Mask2Former and Grounding DINO, as in GenEval, whose ``max_overlap`` is 1.0)."""

    def __init__(
        self,
        model: str,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        classes: Sequence[str] = COCO_CLASSES,
        template: str = "a photo of a {}",
        nms_iou: float | None = None,
        min_score: float = 0.05,
        query_chunk: int | None = None,
    ) -> None:
        from transformers import AutoConfig

        from imgalign.hub import cannot_load, check_weights, resolve

        self.name = model
        self.device, self.dtype = torch.device(device), dtype
        self.template, self.min_score = template, min_score
        path = resolve(model)
        try:
            config = AutoConfig.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise FileNotFoundError(cannot_load(f"detector {model!r}", e, path)) from None
        check_weights(f"detector {model!r}", path)
        self.kind = config.model_type
        self.query_chunk = query_chunk  # at most this many class names per forward pass of a zero-shot model
        if self.kind in ZERO_SHOT_TYPES:
            from transformers import AutoModelForZeroShotObjectDetection, AutoProcessor

            try:
                self.model = AutoModelForZeroShotObjectDetection.from_pretrained(path, dtype=dtype)
                self.processor = AutoProcessor.from_pretrained(path)
            # no weights or no processor file: transformers' text named no detector
            except (OSError, ValueError) as e:
                raise FileNotFoundError(cannot_load(f"detector {model!r}", e, path)) from None
            self.classes = list(classes)
        else:
            from transformers import AutoImageProcessor

            if self.kind in INSTANCE_SEG_TYPES:
                from transformers import AutoModelForUniversalSegmentation as Auto
            else:
                from transformers import AutoModelForObjectDetection as Auto
            try:
                self.model = Auto.from_pretrained(path, dtype=dtype)
            except ValueError as e:
                raise ValueError(
                    f"detector {model!r} (model type {self.kind!r}) is neither an object detector, an instance "
                    f"segmenter (Mask2Former, MaskFormer) nor a zero-shot detector ({', '.join(ZERO_SHOT_TYPES)}): {e}"
                ) from None
            except OSError as e:  # no weights file: transformers' text named no detector
                raise FileNotFoundError(cannot_load(f"detector {model!r}", e, path)) from None
            try:
                self.processor = AutoImageProcessor.from_pretrained(path)
            except (OSError, ValueError) as e:
                raise FileNotFoundError(cannot_load(f"detector {model!r}", e, path)) from None
            id2label = {int(k): v for k, v in config.id2label.items()}
            self.label_map = {i: canonical_label(v, classes) for i, v in id2label.items()}
            self.classes = sorted({c for c in self.label_map.values() if c is not None})
            if not self.classes:
                asked = (
                    "GenEval's classes"
                    if set(classes) == set(COCO_CLASSES)
                    else f"the classes {list(classes)}"
                )
                labels = list(id2label.values())
                more = (
                    ", ..." if len(labels) > 8 else ""
                )  # (it ended in "..." also when that was every label)
                raise ValueError(
                    f"detector {model!r} knows none of {asked} (its labels: {', '.join(labels[:8])}{more}); use a "
                    "COCO detector or a zero-shot one, and GenEval's COCO class names in the prompts (imgalign.eval.real.COCO_CLASSES)"
                )
        self.nms_iou = nms_iou if nms_iou is not None else (0.3 if self.kind in ("owlvit", "owlv2") else None)
        self.model.to(self.device).eval()

    @torch.no_grad()
    def __call__(self, image: Image.Image) -> Detections:
        image = image.convert("RGB")
        if self.kind in ("owlvit", "owlv2"):
            found = self._owl(image)
        elif self.kind in ZERO_SHOT_TYPES:
            found = self._grounding(image)
        elif self.kind in INSTANCE_SEG_TYPES:
            found = self._instances(image)
        else:
            found = self._boxes(image)
        out: Detections = {}
        for cls, dets in found.items():
            if self.nms_iou is not None and len(dets) > 1:
                boxes = torch.tensor([d.box for d in dets])
                keep = box_nms(boxes, torch.tensor([d.score for d in dets]), self.nms_iou).tolist()
                dets = [dets[i] for i in keep]
            out[cls] = sorted(dets, key=lambda d: -d.score)
        return out

    def _inputs(self, **kw: Any) -> dict[str, Any]:
        enc = self.processor(return_tensors="pt", **kw)
        return {
            k: v.to(self.device, self.dtype if v.is_floating_point() else v.dtype)
            for k, v in enc.items()
            if isinstance(v, torch.Tensor)
        }

    def _add(self, found: dict[str, list[Detection]], cls: str | None, box: Sequence[float], score: float,
             size: tuple[int, int], mask: np.ndarray | None = None) -> None:  # fmt: skip
        if cls is None or score < self.min_score:
            return
        w, h = size
        x0, y0, x1, y1 = (float(v) for v in box)
        box = (min(max(x0, 0.0), w), min(max(y0, 0.0), h), min(max(x1, 0.0), w), min(max(y1, 0.0), h))
        if box[2] - box[0] < 1 or box[3] - box[1] < 1:
            return  # under a pixel once clipped to the image: nothing to classify or place
        found.setdefault(cls, []).append(Detection(box=box, score=float(score), mask=mask))

    def _boxes(self, image: Image.Image) -> dict[str, list[Detection]]:
        outputs = self.model(**self._inputs(images=image))
        res = self.processor.post_process_object_detection(
            outputs, threshold=self.min_score, target_sizes=[image.size[::-1]]
        )[0]
        found: dict[str, list[Detection]] = {}
        for s, lab, b in zip(res["scores"].tolist(), res["labels"].tolist(), res["boxes"].tolist()):
            self._add(found, self.label_map.get(int(lab)), b, s, image.size)
        return found

    def _instances(self, image: Image.Image) -> dict[str, list[Detection]]:
        outputs = self.model(**self._inputs(images=image))
        res = self.processor.post_process_instance_segmentation(
            outputs, threshold=self.min_score, target_sizes=[image.size[::-1]], return_binary_maps=True
        )[0]
        found: dict[str, list[Detection]] = {}
        seg = res["segmentation"]
        if seg is None:
            return found
        for k, info in enumerate(res["segments_info"]):
            mask = seg[k].cpu().numpy().astype(bool)  # (H, W)
            if not mask.any():
                continue
            ys, xs = np.nonzero(mask)
            # box from the mask, as mmdet's Mask2Former does
            box = (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))
            self._add(found, self.label_map.get(int(info["label_id"])), box, info["score"], image.size, mask)
        return found

    def _best_class(
        self,
        found: dict[str, list[Detection]],
        names: Sequence[str],
        scores: torch.Tensor,
        boxes: torch.Tensor,
        size: tuple[int, int],
    ) -> None:
        """Give each box its best class among the queried ones (scores [num_boxes, len(names)]), as OWL's own
        inference and the transformers post-processing do, so one object cannot count as two classes."""
        best, idx = scores.max(-1)  # (num_boxes,)
        for i in torch.nonzero(best >= self.min_score).flatten().tolist():
            self._add(found, names[int(idx[i])], boxes[i].tolist(), best[i].item(), size)

    def _chunks(self, budget: int | None = None) -> list[list[str]]:
        """Class names per forward pass: all at once, or packed under a token `budget` (Grounding DINO's text
        length); `query_chunk` caps the names per pass."""
        cap = self.query_chunk or len(self.classes)
        chunks: list[list[str]] = [[]]
        used = 0
        for name in self.classes:
            n = (
                len(self.processor.tokenizer(name, add_special_tokens=False)["input_ids"]) + 1
                if budget
                else 0
            )
            if chunks[-1] and (len(chunks[-1]) >= cap or (budget and used + n > budget)):
                chunks.append([])
                used = 0
            chunks[-1].append(name)
            used += n
        return chunks

    def _owl(self, image: Image.Image) -> dict[str, list[Detection]]:
        found: dict[str, list[Detection]] = {}
        w, h = image.size
        # OWLv2 pads to a square at the bottom/right before resizing: its boxes are relative to that square
        target = (max(w, h), max(w, h)) if self.kind == "owlv2" else (h, w)
        for names in self._chunks():
            queries = [[self.template.format(c) for c in names]]
            outputs = self.model(
                **self._inputs(text=queries, images=image, padding="max_length", truncation=True)
            )
            scores = torch.sigmoid(outputs.logits[0].float())  # (num_boxes, num_queries)
            boxes = cxcywh_to_pixels(outputs.pred_boxes[0].float(), target)  # (num_boxes, 4)
            self._best_class(found, names, scores, boxes, image.size)
        return found

    def _grounding(self, image: Image.Image) -> dict[str, list[Detection]]:
        """Grounding DINO: classes joined as "cat. dog. ..." (as many as its text length takes per pass); a
        query's score for a class is the mean probability over the class's tokens (mmdet's
        ``convert_grounding_to_cls_scores``) rather than the merged phrases that thresholding tokens can produce;
        each query then takes its best class. With more classes than one pass holds, a query of one pass and a
        query of another can both report the same object."""
        found: dict[str, list[Detection]] = {}
        tok = self.processor.tokenizer
        w, h = image.size
        dot = tok(".", add_special_tokens=False)["input_ids"]
        budget = int(getattr(self.model.config, "max_text_len", 256)) - 2  # [CLS] and [SEP]
        for names in self._chunks(budget):
            inputs = self._inputs(text=". ".join(names) + ".", images=image)
            spans, pos = [], 1  # after [CLS]
            expected = [tok.cls_token_id]
            for name in names:
                ids = tok(name, add_special_tokens=False)["input_ids"]
                spans.append(list(range(pos, pos + len(ids))))
                expected += ids + dot
                pos += len(ids) + len(dot)
            if inputs["input_ids"][0].tolist()[: len(expected)] != expected:
                raise ValueError(
                    f"detector {self.name!r}: cannot locate the class names in its tokenized query "
                    f"{'. '.join(names)!r}; pass a smaller query_chunk"
                )
            outputs = self.model(**inputs)
            probs = torch.sigmoid(outputs.logits[0].float())  # (num_queries, max_text_len)
            scores = torch.stack([probs[:, sp].mean(-1) for sp in spans], dim=-1)  # (num_queries, len(names))
            boxes = cxcywh_to_pixels(outputs.pred_boxes[0].float(), (h, w))  # (num_queries, 4)
            self._best_class(found, names, scores, boxes, image.size)
        return found


# ---- colour -------------------------------------------------------------------------------------------------
def paste_and_crop(image: Image.Image, det: Detection, background: str = GREY) -> Image.Image:
    """GenEval's ``ImageCrops``: the object pasted on a flat `background` through its mask when the detector gave
    one (otherwise the original pixels), then cropped to its box."""
    image = image.convert("RGB")
    if det.mask is not None:
        mask = np.asarray(det.mask)
        if mask.shape != (image.size[1], image.size[0]):
            raise ValueError(f"mask of shape {mask.shape} does not match the image size {image.size[::-1]}")
        blank = Image.new("RGB", image.size, color=background)
        image = Image.composite(image, blank, Image.fromarray((mask > 0).astype(np.uint8) * 255, mode="L"))
    x0, y0, x1, y1 = det.box
    # at least one pixel, so a degenerate box still yields a crop CLIP can resize
    return image.crop((x0, y0, max(x1, x0 + 1), max(y1, y0 + 1)))


def parse_clip_spec(spec: str) -> tuple[str, str | None]:
    """``"ViT-L-14:openai"`` -> (arch, pretrained tag); a folder or ``local-dir:``/``hf-hub:`` name -> (name, None).

    A folder holds ``open_clip_config.json`` and its weights (open_clip's ``local-dir:`` layout); embedded model
    names (``shapes-clip``) resolve to their folder."""
    from imgalign.hub import EMBEDDED, resolve

    if spec.startswith(("local-dir:", "hf-hub:")):
        return spec, None
    if spec in EMBEDDED or Path(spec).is_dir():
        return f"local-dir:{resolve(spec)}", None
    arch, _, pretrained = spec.partition(":")
    return arch, pretrained or None


CLIP_HINT = (
    "the colour classifier takes no processor=: save its base CLIP's processor into the folder "
    "(CLIPProcessor.from_pretrained(BASE).save_pretrained(FOLDER))"
)
"""How to give a transformers CLIP saved without its processor (PickScore's layout) to the colour classifier."""


class ClipColorClassifier:
    """A :data:`~imgalign.eval.geneval.ColorFn`: CLIP zero-shot colour of each detection, with an open_clip model or
    a transformers CLIP (a folder or a Hub id in the local cache, e.g. openai/clip-vit-large-patch14).

    Per class, the text classifier of each colour is the renormalised mean of its three template embeddings
    (clip_benchmark's ``zero_shot_classifier``, as GenEval uses); each crop is classified by the argmax of
    cosine similarity."""

    def __init__(
        self,
        model: str = GENEVAL_CLIP,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        background: str = GREY,
        batch_size: int = 16,
    ) -> None:
        import open_clip

        from imgalign.hub import load_error_reason, quiet_open_clip_errors
        from imgalign.rewards.clip import (
            check_open_clip_weights,
            incomplete_config,
            load_transformers_clip,
            other_transformers_model,
            transformers_clip_config,
        )

        self.device, self.dtype = torch.device(device), dtype
        self.background, self.batch_size = background, batch_size
        self._text: dict[str, torch.Tensor] = {}
        if transformers_clip_config(model) is not None:  # e.g. openai/clip-vit-large-patch14, GenEval's CLIP
            self.model, self.tokenizer, *_ = load_transformers_clip(model, self.device, dtype, hint=CLIP_HINT)
            from torchvision.transforms.functional import pil_to_tensor

            def preprocess(
                crop: Image.Image,
            ) -> torch.Tensor:  # (3, S, S) through the image processor's steps
                x = pil_to_tensor(crop.convert("RGB"))[None].to(self.device, dtype) / 255
                return self.model.preprocess(x)[0]

            self.preprocess = preprocess
            return
        other = other_transformers_model(f"CLIP {model!r}", model)
        if other:  # "no open_clip_config.json" named no transformers model
            raise ValueError(other)
        name, pretrained = parse_clip_spec(model)
        check_open_clip_weights(name, pretrained)
        try:
            with quiet_open_clip_errors():
                self.model, _, self.preprocess = open_clip.create_model_and_transforms(
                    name, pretrained=pretrained, device=device
                )
            self.tokenizer = open_clip.get_tokenizer(name)
        except (KeyError, TypeError) as e:
            if not name.startswith("local-dir:"):
                raise
            raise ValueError(incomplete_config(name, e)) from None
        except (RuntimeError, OSError, ValueError) as e:
            raise FileNotFoundError(
                f"cannot load CLIP {model!r}: {load_error_reason(e)}. Use ARCH:PRETRAINED (e.g. ViT-L-14:openai, "
                "weights already cached), a local open_clip folder (open_clip_config.json + weights) or hf-hub:ORG/REPO"
            ) from None
        self.model.to(device=device, dtype=dtype).eval()

    @torch.no_grad()
    def text_classifier(self, classname: str) -> torch.Tensor:
        """[D, 10] unit columns, one per colour, for `classname`."""
        if classname not in self._text:
            cols = []
            for color in GENEVAL_COLORS:
                texts = [t.format(c=color, obj=classname) for t in COLOR_TEMPLATES]
                emb = self.model.encode_text(self.tokenizer(texts).to(self.device)).float()  # (3, D)
                emb = torch.nn.functional.normalize(emb, dim=-1).mean(0)
                cols.append(emb / emb.norm())
            self._text[classname] = torch.stack(cols, dim=1)  # (D, 10)
        return self._text[classname]

    @torch.no_grad()
    def __call__(self, image: Image.Image, dets: Sequence[Detection], classname: str) -> list[str]:
        if not dets:
            return []
        clf = self.text_classifier(classname)
        crops = [self.preprocess(paste_and_crop(image, d, self.background)) for d in dets]
        preds: list[int] = []
        for i in range(0, len(crops), self.batch_size):
            x = torch.stack(crops[i : i + self.batch_size]).to(self.device, self.dtype)
            f = torch.nn.functional.normalize(self.model.encode_image(x).float(), dim=-1)  # (b, D)
            preds += (f @ clf).argmax(1).tolist()
        return [GENEVAL_COLORS[p] for p in preds]


# ---- the suite ----------------------------------------------------------------------------------------------
def check_judge_specs(detector: str, clip: str) -> None:
    """Cheap checks before hours of generation: the detector's config loads (a folder or a cached Hub id) and its
    safetensors files are whole, and the CLIP spec names a local open_clip folder with whole weights or a known
    ARCH:PRETRAINED pair. Weights load later."""
    import open_clip
    from transformers import AutoConfig

    from imgalign.hub import cannot_load, check_weights, has_weight_files, names_env_var, resolve, tilde_hint

    try:
        AutoConfig.from_pretrained(resolve(detector))
    except (OSError, ValueError) as e:
        raise FileNotFoundError(cannot_load(f"detector {detector!r}", e, resolve(detector))) from None

    def check_has_weights(what: str, folder: str) -> None:
        # a config without weights failed only when the judge was built, after the whole generation
        if Path(folder).is_dir() and not has_weight_files(folder):
            raise FileNotFoundError(
                f"cannot load {what}: folder {folder!r} has no weights (model.safetensors); copy, download or save "
                "the model there again"
            )

    check_weights(f"detector {detector!r}", resolve(detector))
    check_has_weights(f"detector {detector!r}", resolve(detector))
    from imgalign.rewards.clip import (
        check_open_clip_weights,
        missing_processor,
        other_transformers_model,
        transformers_clip_config,
    )

    if transformers_clip_config(clip) is not None:  # a transformers CLIP folder or cached Hub id
        what = f"transformers CLIP {clip!r}"
        check_weights(what, clip)
        check_has_weights(what, clip)
        # failed only when the judge was built, after the whole generation
        missing = missing_processor(what, clip, CLIP_HINT)
        if missing:
            raise ValueError(missing)
        return
    other = other_transformers_model(f"CLIP {clip!r}", clip)
    if other:  # "no open_clip_config.json" named no transformers model
        raise ValueError(other)
    name, pretrained = parse_clip_spec(clip)
    if name.startswith("local-dir:"):
        if not (Path(name.split(":", 1)[1]) / "open_clip_config.json").is_file():
            raise FileNotFoundError(  # (it said no more: not what the folder is, nor what to give)
                f"CLIP folder {name.split(':', 1)[1]!r} has no open_clip_config.json, and no config.json of a "
                "transformers CLIP (model_type 'clip'): give an open_clip folder, a transformers CLIP folder, or "
                "ARCH:PRETRAINED (e.g. ViT-L-14:openai)"
            )
    elif not name.startswith("hf-hub:"):
        # a path that is not there was "not a known open_clip ARCH:PRETRAINED pair ..., a folder or hf-hub:"
        if Path(clip).is_absolute() or clip.startswith((".", "~")) or names_env_var(clip):
            raise FileNotFoundError(
                f"CLIP {clip!r}: no such folder{tilde_hint(clip)}; give an open_clip or transformers CLIP folder, "
                "or ARCH:PRETRAINED"
            )
        known = {(a.lower(), t.lower()) for a, t in open_clip.list_pretrained()}
        if name not in open_clip.list_models() or (
            pretrained and (name.lower(), pretrained.lower()) not in known
        ):
            raise ValueError(
                f"CLIP {clip!r} is not a known open_clip ARCH:PRETRAINED pair (e.g. ViT-L-14:openai), a folder or "
                "hf-hub:ORG/REPO"
            )
    check_open_clip_weights(name, pretrained)


def no_color(image: Any, dets: Sequence[Detection], classname: str) -> list[str]:
    """The colour function of a prompt set without colour clauses: never called by the judge."""
    raise RuntimeError(f"a colour was asked for {classname!r}, but the prompt set has no colour clause")


def build_judge(
    detector: str,
    clip: str = GENEVAL_CLIP,
    metas: Sequence[dict[str, Any]] | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    nms_iou: float | None = None,
) -> tuple[HFDetector, ColorFn, Callable[[dict[str, Any]], None]]:
    """Detector, colour classifier and metadata validator for :func:`imgalign.eval.suite.judge_folder`.

    A zero-shot detector is queried with the classes of `metas` (all 80 COCO classes when None). CLIP is not
    loaded when no prompt of `metas` has a colour clause (the colour function is then never called)."""
    classes = metadata_classes(metas) if metas else list(COCO_CLASSES)
    det = HFDetector(detector, device=device, dtype=dtype, classes=classes, nms_iou=nms_iou)
    needs_color = metas is None or any(
        isinstance(c, dict) and "color" in c
        for m in metas
        for c in (m.get("include") if isinstance(m.get("include"), list) else [])
    )
    color: ColorFn = ClipColorClassifier(clip, device=device, dtype=dtype) if needs_color else no_color
    known = list(det.classes)
    return det, color, lambda meta: validate_real_metadata(meta, known)


def evaluate_folder(
    images_dir: Path,
    out_dir: Path,
    detector: str,
    clip: str = GENEVAL_CLIP,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    model: str = "images",
    nms_iou: float | None = None,
    progress: bool = True,
    sampler: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    judge: tuple[HFDetector, ColorFn, Callable[[dict[str, Any]], None]] | None = None,
    source_dir: Path | None = None,
) -> dict[str, Any]:
    """Judge a GenEval-layout folder with a transformers detector and an open_clip colour classifier; the detector
    and colour classifier are recorded in summary.json as fields of their own (with `extra`). ``judge``: the
    :func:`build_judge` result for these names, when the caller already loaded it (else it is built here)."""
    from imgalign.eval.suite import judge_folder, read_folder

    if judge is None:
        metas = [f.metadata for f in read_folder(images_dir)]
        judge = build_judge(detector, clip, metas, device, dtype, nms_iou)
    det, color, validate = judge
    summary = judge_folder(
        images_dir,
        out_dir,
        det,
        color,
        suite=f"geneval (detector {detector}, clip {clip})",
        model=model,
        validate_metadata=validate,
        progress=progress,
        sampler=sampler,
        extra={"detector": detector, "clip": clip, **(extra or {})},
        source_dir=source_dir,
    )
    return summary
