"""A classical-vision detector for shapes-world images: colour unmixing, connected components, template matching.

1. Colour segmentation: each pixel p is explained as background b blended with one palette colour c,
   p ~ b + a (c - b); a = clip(<p - b, c - b> / |c - b|^2, 0, 1). The colour with the smallest residual wins; the
   pixel is foreground when its alpha a > 0.5 (anti-aliased edges keep their true colour, not a neighbour in RGB).
2. Connected components (8-connectivity) per colour; components under `min_area` pixels are noise.
3. Shape: soft IoU of the component's alpha inside its box against each class's template rendered at that box;
   the best class wins. Confidence = clip((IoU - 0.5) / 0.4, 0, 1): clean shapes score 1, ragged blobs score low
   (a merged pair or a smear fails the counting threshold of 0.9 long before it fails the 0.3 threshold). Every
   class's confidence is kept in `Detection.class_scores` (for the dense credit of a near-miss shape).
4. Colour: the component's colour (palette distance, step 1).

Outputs raw :class:`~imgalign.eval.geneval.Detection` lists per class; thresholds are applied by the scorer.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from PIL import Image
from scipy import ndimage

from imgalign import shapes as W
from imgalign.eval.geneval import Detection, Detections

_PALETTE = np.array(list(W.COLORS.values()), dtype=np.float32)  # (K, 3)
_BG = np.array(W.BACKGROUND, dtype=np.float32)


@lru_cache(maxsize=4096)
def _template(shape: str, w: int, h: int) -> np.ndarray:
    return W.shape_mask(shape, w, h)


def unmix(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-pixel colour index (H, W) and alpha (H, W) of the best background-to-palette blend."""
    p = rgb.astype(np.float32) - _BG  # (H, W, 3)
    d = _PALETTE - _BG  # (K, 3)
    a = np.clip(np.einsum("hwc,kc->hwk", p, d) / (d * d).sum(-1), 0.0, 1.0)  # (H, W, K)
    resid = np.linalg.norm(p[:, :, None, :] - a[..., None] * d, axis=-1)  # (H, W, K)
    k = resid.argmin(-1)
    alpha = np.take_along_axis(a, k[..., None], -1)[..., 0]
    return k, alpha


class ShapesDetector:
    """Callable: image (PIL, or uint8 array H x W x 3) -> raw detections per shape class."""

    def __init__(self, min_area: int = 12, fg_alpha: float = 0.5) -> None:
        self.min_area = min_area
        self.fg_alpha = fg_alpha

    def __call__(self, image: Image.Image | np.ndarray) -> Detections:
        rgb = np.asarray(image.convert("RGB") if isinstance(image, Image.Image) else image)
        if rgb.ndim != 3 or rgb.shape[-1] != 3:
            raise ValueError(f"expected an RGB image (H, W, 3), got shape {rgb.shape}")
        # min_area is for the world's IMAGE_SIZE square: scaled by the pixel count, as the width alone over-scaled
        # it for a wide image (and under-scaled it for a tall one)
        area_scale = rgb.shape[0] * rgb.shape[1] / W.IMAGE_SIZE**2
        k, alpha = unmix(rgb)
        out: Detections = {s: [] for s in W.SHAPES}
        names = list(W.COLORS)
        min_area = self.min_area * area_scale
        for ci, cname in enumerate(names):
            fg = (k == ci) & (alpha > self.fg_alpha)
            if not fg.any():
                continue
            labels, n = ndimage.label(fg, structure=np.ones((3, 3), dtype=int))
            for sl_i, sl in enumerate(ndimage.find_objects(labels), start=1):
                if sl is None:
                    continue
                comp = labels[sl] == sl_i
                if comp.sum() < min_area:
                    continue
                ys, xs = sl
                # soft alpha of this component in its box (pixels of other components zeroed)
                soft = np.where(comp | ((labels[sl] == 0) & (k[sl] == ci)), alpha[sl], 0.0)
                h, w = comp.shape
                ious = self._ious(soft, w, h)
                shape = max(ious, key=ious.get)
                scores = {s: float(np.clip((iou - 0.5) / 0.4, 0.0, 1.0)) for s, iou in ious.items()}
                box = (float(xs.start), float(ys.start), float(xs.stop), float(ys.stop))
                out[shape].append(
                    Detection(box=box, score=scores[shape], mask=None, color=cname, class_scores=scores)
                )
        return {s: d for s, d in out.items() if d}

    @staticmethod
    def _ious(soft: np.ndarray, w: int, h: int) -> dict[str, float]:
        """Soft IoU of the component's alpha with each class's template at its box (first class wins ties)."""
        out = {}
        for shape in W.SHAPES:
            t = _template(shape, w, h)
            out[shape] = float(np.minimum(soft, t).sum() / max(np.maximum(soft, t).sum(), 1e-6))
        return out
