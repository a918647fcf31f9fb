"""The reference DDP script's joint image/mask augmentation: resize, crop and flip per sample on uint8 tensors in
the data workers (a per-sample ``torch.Generator``), rotation and normalisation batched on the device."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)


class JointCropFlip:
    """The reference's ``RandomCrop`` (resizing a smaller image up) and ``RandomHorizontallyFlip`` of a uint8 image
    ``(3, H, W)`` and mask ``(1, H, W)``; the image stays channels-last (a crop copies whole rows)."""

    def __init__(self, crop: int) -> None:
        if crop < 1:
            raise ValueError(f"crop must be positive, got {crop}")
        self.crop = int(crop)

    def __call__(
        self, image: torch.Tensor, mask: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if image.shape[-2:] != mask.shape[-2:]:
            raise ValueError(f"image {tuple(image.shape)} and mask {tuple(mask.shape)} differ in size")
        c = self.crop
        h, w = image.shape[-2:]
        if h < c or w < c:
            # torchvision where it resizes: the launching process of `train` imports this package
            # for its data checks, and torchvision (with torch._dynamo) would cost it a second
            from torchvision.transforms import InterpolationMode
            from torchvision.transforms.v2 import functional as TF

            # antialias=True mirrors PIL, which filters when a side shrinks during the resize.
            image = TF.resize(image, [c, c], interpolation=InterpolationMode.BILINEAR, antialias=True)
            # NEAREST_EXACT samples pixel centres like PIL's NEAREST, keeping mask and image aligned.
            mask = TF.resize(mask, [c, c], interpolation=InterpolationMode.NEAREST_EXACT)
            h = w = c
        x = int(torch.randint(0, w - c + 1, (1,), generator=generator))
        y = int(torch.randint(0, h - c + 1, (1,), generator=generator))
        flip = bool(torch.rand((), generator=generator, dtype=torch.float64) < 0.5)
        mask = mask[..., y : y + c, x : x + c]
        mask = mask.flip(-1) if flip else mask.contiguous()
        pixels = image.permute(1, 2, 0)[y : y + c, x : x + c]  # (c, c, 3)
        pixels = pixels.flip(1) if flip else pixels.contiguous()
        return pixels.permute(2, 0, 1), mask


def draw_angle(generator: torch.Generator, rotate: float) -> float:
    """A rotation angle in degrees, uniform in ``[-rotate, rotate)`` like the reference's RandomRotate."""
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    return u * 2.0 * rotate - rotate


def rotate_batch(images: torch.Tensor, masks: torch.Tensor, angles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate float images (bilinear) and masks (nearest) counter-clockwise by ``angles`` degrees, 0-filled."""
    n, _, h, w = images.shape
    t = -torch.deg2rad(angles.to(device=images.device, non_blocking=True).reshape(n).to(torch.float32))
    cos, sin = torch.cos(t).view(n, 1, 1), torch.sin(t).view(n, 1, 1)
    # grid_sample's grid for PIL's rotate(a), which maps output pixel p to input R(-a) (p - c) + c (pixels,
    # y down): in [-1, 1] coordinates of the pixel centres the off-diagonal terms carry the aspect ratio.
    # F.affine_grid's (align_corners=False), built as two in-place broadcast sums: several times cheaper
    xs = ((torch.arange(w, dtype=torch.float32, device=images.device) * 2 + 1) / w - 1).view(1, 1, w)
    ys = ((torch.arange(h, dtype=torch.float32, device=images.device) * 2 + 1) / h - 1).view(1, h, 1)
    grid = torch.empty(n, h, w, 2, dtype=torch.float32, device=images.device)
    torch.add(cos * xs, (sin * (h / w)) * ys, out=grid[..., 0])
    torch.add((-sin * (w / h)) * xs, cos * ys, out=grid[..., 1])
    images = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    masks = F.grid_sample(masks, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    return images, masks


@functools.cache
def _affine_stats(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    # (scale, shift) with x_uint8 * scale + shift == (x_uint8 / 255 - mean) / std: one in-place multiply-add;
    # cached per device, as on a GPU each new tensor is a copy from the host
    m = torch.tensor(IMAGENET_MEAN, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    s = torch.tensor(IMAGENET_STD, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    return 1.0 / (255.0 * s), -m / s


def _to_255_float(x: torch.Tensor) -> torch.Tensor:
    # always a new contiguous (NCHW) tensor, whatever the input's memory layout: uint8 0..255
    # converted, or a float input (taken as [0, 1]) rescaled
    out = x.to(torch.float32, memory_format=torch.contiguous_format, copy=True)
    return out if x.dtype == torch.uint8 else out.mul_(255.0)


def normalize_image(images: torch.Tensor) -> torch.Tensor:
    """uint8 ``(N, 3, H, W)`` (or ``(3, H, W)``) to float, scaled to [0, 1] then ImageNet-normalised,
    exactly as the training augmentation does (train and eval inputs match bit for bit)."""
    scale, shift = _affine_stats(images.device)
    if images.ndim == 3:
        scale, shift = scale[0], shift[0]
    return _to_255_float(images).mul_(scale).add_(shift)


class DeviceAugment:
    """Rotate (``angles`` in degrees, on the host) and normalise a uint8 training batch on its device: ImageNet-
    normalised float images and float masks in [0, 1] (soft masks stay soft)."""

    def __call__(
        self, images: torch.Tensor, masks: torch.Tensor, angles: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        scale, shift = _affine_stats(images.device)
        # Rotation is linear and fills with 0, so rotating the 0..255 values and normalising
        # afterwards equals normalising the rotated [0, 1] image, with black corners as in PIL.
        x = _to_255_float(images)
        y = masks.to(torch.float32, memory_format=torch.contiguous_format)
        y = y.div_(255.0) if masks.dtype == torch.uint8 else y  # a float mask is taken as [0, 1]
        if bool((angles != 0).any()):  # the angles come with the batch, on the CPU: no device sync
            x, y = rotate_batch(x, y, angles)
        return x.mul_(scale).add_(shift), y
