"""Joint image/mask augmentation, split between the data workers and the training device.

The seed applied ``RandomCrop(300)`` (resizing both to 300x300 when a side is smaller),
``RandomHorizontallyFlip`` and ``RandomRotate(10)`` per sample with PIL, then ToTensor/Normalize.
Here the cheap, shape-changing part (resize if small, crop, flip) stays per sample on uint8
tensors, and rotation plus float conversion and normalisation run batched on the device. All
randomness is drawn from a per-sample ``torch.Generator`` so a resumed run repeats it exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as TF

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "JointCropFlip",
    "draw_angle",
    "rotate_batch",
    "normalize_image",
    "device_augment",
    "DeviceAugment",
]

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)


class JointCropFlip:
    """Per-sample crop and flip of a uint8 image ``(3, H, W)`` and mask ``(1, H, W)``.

    Matches the seed's distribution: when either side is smaller than ``crop`` both are resized to
    ``crop x crop`` (image bilinear, mask nearest); the crop offset is uniform over every valid
    offset; the flip happens with probability 0.5. The three draws are always made, in that order,
    so switching ``flip`` off does not shift the angles drawn after it.
    """

    def __init__(self, crop: int, flip: bool = True) -> None:
        if crop < 1:
            raise ValueError(f"crop must be positive, got {crop}")
        self.crop = int(crop)
        self.flip = bool(flip)

    def __call__(
        self, image: torch.Tensor, mask: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the cropped (and maybe flipped) ``(image, mask)``, both uint8."""
        if image.shape[-2:] != mask.shape[-2:]:
            raise ValueError(f"image {tuple(image.shape)} and mask {tuple(mask.shape)} differ in size")
        c = self.crop
        h, w = image.shape[-2:]
        if h < c or w < c:
            # antialias=True mirrors PIL, which filters when a side shrinks during the resize.
            image = TF.resize(image, [c, c], interpolation=InterpolationMode.BILINEAR, antialias=True)
            # NEAREST_EXACT samples pixel centres like PIL's NEAREST, keeping mask and image aligned.
            mask = TF.resize(mask, [c, c], interpolation=InterpolationMode.NEAREST_EXACT)
            h = w = c
        x = int(torch.randint(0, w - c + 1, (1,), generator=generator))
        y = int(torch.randint(0, h - c + 1, (1,), generator=generator))
        flip = bool(torch.rand((), generator=generator, dtype=torch.float64) < 0.5)
        image = image[..., y : y + c, x : x + c]
        mask = mask[..., y : y + c, x : x + c]
        if flip and self.flip:
            image = image.flip(-1)
            mask = mask.flip(-1)
        return image.contiguous(), mask.contiguous()


def draw_angle(generator: torch.Generator, rotate: float) -> float:
    """Draw a rotation angle in degrees, uniform in ``[-rotate, rotate)`` like the seed's RandomRotate."""
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    return u * 2.0 * rotate - rotate


def _to_unit_float(x: torch.Tensor) -> torch.Tensor:
    # uint8 holds 0..255; a float input is taken as already scaled to [0, 1].
    if x.dtype == torch.uint8:
        return x.to(torch.float32).div_(255.0)
    return x.to(torch.float32)


def _rotation_grid(angles: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Sampling grid for a counter-clockwise rotation by ``angles`` degrees about the image centre.

    PIL's ``rotate(a)`` maps each output pixel p to input ``R(-a) (p - c) + c`` in pixel units with
    y pointing down; ``affine_grid`` works in [-1, 1] coordinates per axis, so the off-diagonal
    terms carry the aspect ratio.
    """
    t = -torch.deg2rad(angles.to(torch.float32))
    cos, sin = torch.cos(t), torch.sin(t)
    zero = torch.zeros_like(cos)
    theta = torch.stack(
        [
            torch.stack([cos, sin * (height / width), zero], dim=-1),
            torch.stack([-sin * (width / height), cos, zero], dim=-1),
        ],
        dim=-2,
    )
    return F.affine_grid(theta, [angles.shape[0], 1, height, width], align_corners=False)


def rotate_batch(
    images: torch.Tensor, masks: torch.Tensor, angles: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate float images (bilinear) and masks (nearest) counter-clockwise, filling with zeros."""
    n, _, h, w = images.shape
    angles = angles.to(device=images.device).reshape(n)
    grid = _rotation_grid(angles, h, w)
    images = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    masks = F.grid_sample(masks, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    return images, masks


def _stats(
    mean: Sequence[float], std: Sequence[float], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    m = torch.tensor(mean, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    return m, s


def normalize_image(
    images: torch.Tensor, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD
) -> torch.Tensor:
    """uint8 ``(N, 3, H, W)`` (or ``(3, H, W)``) to float, scaled to [0, 1] then ImageNet-normalised."""
    x = _to_unit_float(images)
    m, s = _stats(mean, std, x.device)
    if x.ndim == 3:
        m, s = m[0], s[0]
    return (x - m) / s


def device_augment(
    images: torch.Tensor,
    masks: torch.Tensor,
    angles: torch.Tensor | None,
    rotate_enabled: bool = True,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate and normalise a batch on the device the tensors live on.

    ``images`` uint8 ``(N, 3, H, W)``, ``masks`` uint8 ``(N, 1, H, W)``, ``angles`` ``(N,)`` degrees.
    Returns normalised float images and float masks in [0, 1] (value / 255, soft masks stay soft).
    The image is rotated before normalising so the corners are black, as PIL fills them.
    """
    x = _to_unit_float(images)
    y = _to_unit_float(masks)
    # Angles normally arrive on the CPU with the batch, so this test costs no device sync.
    if rotate_enabled and angles is not None and bool((angles != 0).any()):
        x, y = rotate_batch(x, y, angles)
    m, s = _stats(mean, std, x.device)
    return (x - m) / s, y


class DeviceAugment:
    """Callable wrapper of :func:`device_augment` that caches the normalisation constants per device.

    Example::

        augment = DeviceAugment(rotate_enabled=True)
        images, masks = augment(batch["image"].to(device), batch["mask"].to(device), batch["angle"])
    """

    def __init__(
        self,
        rotate_enabled: bool = True,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
    ) -> None:
        self.rotate_enabled = rotate_enabled
        self.mean = tuple(float(v) for v in mean)
        self.std = tuple(float(v) for v in std)
        self._cache: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(
        self, images: torch.Tensor, masks: torch.Tensor, angles: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = _to_unit_float(images)
        y = _to_unit_float(masks)
        if self.rotate_enabled and angles is not None and bool((angles != 0).any()):
            x, y = rotate_batch(x, y, angles)
        if x.device not in self._cache:
            self._cache[x.device] = _stats(self.mean, self.std, x.device)
        m, s = self._cache[x.device]
        return (x - m) / s, y

    def __repr__(self) -> str:
        return f"DeviceAugment(rotate_enabled={self.rotate_enabled}, mean={self.mean}, std={self.std})"
