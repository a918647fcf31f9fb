"""Dense-CRF refinement of saliency maps with the parameters of the original R3Net ``infer.py``
(``misc.crf_refine``, from DSS). ``pydensecrf2`` is an optional extra (``require_crf``).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import torch

from ..errors import install_extra, optional_module

CRF_MISSING = f"--crf needs the optional extra: {install_extra('crf')} (builds pydensecrf2: needs a C++ compiler)"

_TAU = 1.05  # temperature of the unary energy
_EPSILON = 1e-8  # keeps log() finite at probabilities 0 and 1
_GAUSSIAN = {"sxy": 3, "compat": 3}
_BILATERAL = {"sxy": 60, "srgb": 5, "compat": 5}
_STEPS = 1


def require_crf() -> ModuleType:
    """The ``pydensecrf.densecrf`` module, else an ``OptionError`` (commands call this before any work)."""
    return optional_module("pydensecrf.densecrf", CRF_MISSING)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def crf_refine(image: torch.Tensor, saliency: torch.Tensor) -> torch.Tensor:
    """A uint8 ``(H, W)`` map refined over its uint8 ``(3, H, W)`` RGB image, on ``saliency``'s device: a
    2-label CRF, unaries from the probability tempered by ``tau`` and a sigmoid, one mean-field step."""
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
