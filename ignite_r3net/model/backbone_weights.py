"""``--pretrained``: where a backbone's starting weights come from: ``imagenet`` (the backbone's
documented ImageNet-1k weights), ``none`` (random), a file (a torchvision or timm ResNet state_dict,
or the original release's ``resnext_101_32x4d.pth``, read without unpickling code), a torchvision
weights name (``IMAGENET1K_V2``, ``DEFAULT``; torch's hub cache, ``$TORCH_HOME``) or
``hf-hub:ORG/NAME[@REVISION]`` (``model.hub``).

``resolve_weights`` runs in the launching process, once per node before any worker starts: it
downloads what is missing and returns the local file and its sha256, which the run records; workers
only read that file.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

from filelock import FileLock
from torch import nn

from ..checkpoint_io import load_checkpoint
from ..errors import CheckpointError, OptionError, error_line
from .backbones import backbone_spec
from .hub import HF_PREFIX, cached_hub_file, fetch_hub_file, is_hub_source
from .key_layouts import backbone_state_dict_from_any, strict_load

NONE = "none"
IMAGENET = "imagenet"
WEIGHT_SUFFIXES = (".pth", ".pt", ".bin", ".safetensors")
# a Hugging Face repository holds its weights under one of these names, safetensors preferred
HF_FILES = ("model.safetensors", "pytorch_model.bin")
_WAYS_OUT = "use --pretrained none (random weights) or --pretrained FILE (a local .pth or .safetensors)"


@dataclass(frozen=True)
class Weights:
    """The weights a run starts from: the resolved source, the local file and its sha256."""

    source: str
    file: str
    sha256: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def is_file_source(source: str) -> bool:
    """Whether ``--pretrained`` names a file (torchvision weights names are bare identifiers)."""
    return "/" in source or os.sep in source or source.endswith(WEIGHT_SUFFIXES) or os.path.exists(source)


def resolve_weights(source: str, backbone: str) -> Weights | None:
    """The local file of ``--pretrained SOURCE`` for ``backbone``, downloaded when needed; None for
    ``none``. Raises a one-line ``OptionError``: what was tried, the cache, the ways out."""
    if source == NONE:
        return None
    what = f"--pretrained {source}"
    if source == IMAGENET:
        source = backbone_spec(backbone).imagenet
        what += f" (the ImageNet-1k weights of {backbone}, {source})"
    if is_hub_source(source):  # before the file test: a repository id holds a "/"
        path = _fetch_from_hub(source, what)
    elif is_file_source(source):
        path = Path(source).expanduser().resolve()
        if not path.is_file():
            raise OptionError(f"{what}: no such file")
    else:
        path = _fetch_from_torchvision(backbone, source, what)
    return Weights(source=source, file=str(path), sha256=sha256_of(path))


def load_backbone_weights(backbone: nn.Module, file: str | Path) -> None:
    """Load a backbone state_dict file (torchvision, timm or the original layout) into ``backbone``;
    missing or unexpected keys are one ``ValueError`` line listing them."""
    try:
        state = load_checkpoint(file, what="weights file")
    except CheckpointError as e:
        raise ValueError(str(e)) from None
    strict_load(backbone, backbone_state_dict_from_any(state), f"backbone weights {file}")


def sha256_of(path: str | Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _fetch_from_hub(source: str, what: str) -> Path:
    # the first of HF_FILES the repository holds; any of them in the cache before the network
    for filename in HF_FILES:
        cached = cached_hub_file(source, filename)
        if cached is not None:
            return cached
    for filename in HF_FILES:
        path = fetch_hub_file(source, filename, what, _WAYS_OUT)
        if path is not None:
            return path
    raise OptionError(f"{what}: the repository holds none of {', '.join(HF_FILES)}; {_WAYS_OUT}")


def _fetch_from_torchvision(backbone: str, name: str, what: str) -> Path:
    import torch.hub
    from torchvision.models import get_model_weights

    tv_name = backbone_spec(backbone).torchvision_name
    if tv_name is None:
        raise OptionError(
            f"{what}: torchvision publishes no weights for backbone {backbone}; use --pretrained imagenet "
            f"({backbone_spec(backbone).imagenet}), an hf-hub:ORG/NAME repository, or a file"
        )
    enum = get_model_weights(tv_name)
    valid = ["DEFAULT"] + [w.name for w in enum]
    if name not in valid:
        raise OptionError(
            f"{what}: not a torchvision weights name of {backbone} ({', '.join(valid)}), nor a file, "
            f"'{IMAGENET}', '{NONE}' or {HF_PREFIX}ORG/NAME"
        )
    url = (enum.DEFAULT if name == "DEFAULT" else enum[name]).url
    cache = Path(torch.hub.get_dir()) / "checkpoints"
    path = cache / os.path.basename(urlparse(url).path)
    # torchvision names its files name-<first hex digits of the sha256>.pth, as torch.hub checks
    match = re.search(r"-([a-f0-9]*)\.", path.name)
    hash_prefix = match.group(1) if match else None
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock"):  # the launching processes of one node download once
        if not path.is_file():
            try:
                torch.hub.download_url_to_file(url, str(path), hash_prefix=hash_prefix, progress=True)
            except Exception as e:  # noqa: BLE001 - offline, proxy, disk: one line
                raise OptionError(
                    f"{what}: cannot download {url} into torch's cache {cache} ({error_line(e)}); "
                    f"put the file there (TORCH_HOME selects the cache), or {_WAYS_OUT}"
                ) from None
    return path
