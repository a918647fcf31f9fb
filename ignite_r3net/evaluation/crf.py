"""Dense-CRF refinement of saliency maps, as the original R3Net ``infer.py`` applies it.

The original (``misc.crf_refine``, borrowed from DSS) builds a two-label fully connected CRF: the
unary energy comes from the saliency probability, tempered by ``tau`` and a sigmoid of the
probability; a Gaussian and a bilateral pairwise kernel; one mean-field step, whose foreground
marginal, times 255 and truncated to uint8, is the refined map. The parameters below are those.
``pydensecrf2`` (imported as ``pydensecrf``) is an optional extra: without it ``--crf`` fails with
one line telling how to install it.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import torch

from ..errors import OptionError

CRF_MISSING = "--crf needs the optional extra: pip install 'ignite_r3net[crf]'"

_TAU = 1.05  # temperature of the unary energy
_EPSILON = 1e-8  # keeps log() finite at probabilities 0 and 1
_GAUSSIAN = {"sxy": 3, "compat": 3}
_BILATERAL = {"sxy": 60, "srgb": 5, "compat": 5}
_STEPS = 1


def require_crf() -> ModuleType:
    """The ``pydensecrf.densecrf`` module, or a one-line ``OptionError`` saying how to get it
    (commands call this before any work, not after inference)."""
    try:
        import pydensecrf.densecrf as dcrf
    except ImportError:
        raise OptionError(CRF_MISSING) from None
    return dcrf


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def crf_refine(image: torch.Tensor, saliency: torch.Tensor) -> torch.Tensor:
    """Refine a uint8 ``(H, W)`` map with a dense CRF over its uint8 ``(3, H, W)`` RGB image; the
    uint8 result is on ``saliency``'s device."""
    dcrf = require_crf()
    if image.dtype != torch.uint8 or saliency.dtype != torch.uint8:
        raise TypeError(f"crf_refine needs uint8 inputs, got {image.dtype} and {saliency.dtype}")
    if image.dim() != 3 or image.shape[0] != 3 or image.shape[1:] != saliency.shape:
        raise ValueError(f"image {tuple(image.shape)} and map {tuple(saliency.shape)} do not match")
    h, w = saliency.shape
    # pydensecrf reads the image as a C-contiguous (H, W, 3) uint8 buffer
    rgb = np.ascontiguousarray(image.permute(1, 2, 0).cpu().numpy())
    prob = saliency.cpu().numpy().astype(np.float64) / 255.0
    background = -np.log(1.0 - prob + _EPSILON) / (_TAU * _sigmoid(1.0 - prob))
    foreground = -np.log(prob + _EPSILON) / (_TAU * _sigmoid(prob))
    unary = np.ascontiguousarray(np.stack([background.ravel(), foreground.ravel()]).astype(np.float32))
    crf = dcrf.DenseCRF2D(w, h, 2)
    crf.setUnaryEnergy(unary)
    crf.addPairwiseGaussian(**_GAUSSIAN)
    crf.addPairwiseBilateral(rgbim=rgb, **_BILATERAL)
    marginals = np.asarray(crf.inference(_STEPS), dtype=np.float32)
    # truncation (not rounding), as the original's astype('uint8'), so numbers match its maps
    refined = (marginals[1] * 255).reshape(h, w).astype(np.uint8)
    return torch.from_numpy(refined).to(saliency.device)
