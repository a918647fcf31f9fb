"""``--pretrained``: where a backbone's starting weights come from, fetched once and recorded.

Accepted sources:

* ``imagenet`` (the default): the backbone's documented ImageNet-1k weights (``BACKBONES[name].imagenet``);
* ``none``: random initialisation;
* a file (``.pth``, ``.pt``, ``.bin``, ``.safetensors``): a torchvision or timm ResNet state_dict, or
  the original R3Net release's ``resnext_101_32x4d.pth``; read without unpickling code;
* a torchvision weights name of the backbone (``IMAGENET1K_V1``, ``IMAGENET1K_V2``, ``DEFAULT``),
  downloaded into torch's hub cache (``$TORCH_HOME``);
* ``hf-hub:ORG/NAME``, e.g. timm's ``hf-hub:timm/resnext101_32x4d.gluon_in1k``, fetched with
  ``huggingface_hub`` into its cache (``HF_HOME``, ``HF_HUB_OFFLINE`` honoured).

``resolve_weights`` runs in the launching process (once per node, before any worker starts): it
downloads what is missing, with a progress bar, and returns the local file and its sha256, which
the run records in config.json and train.log. Workers only read that file.
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
from .key_layouts import backbone_state_dict_from_any, strict_load

NONE = "none"
IMAGENET = "imagenet"
HF_PREFIX = "hf-hub:"
WEIGHT_SUFFIXES = (".pth", ".pt", ".bin", ".safetensors")
# a Hugging Face repository holds its weights under one of these names, safetensors preferred
HF_FILES = ("model.safetensors", "pytorch_model.bin")
HUB_PROBE_SECONDS = 5
_WAYS_OUT = "use --pretrained none (random weights) or --pretrained FILE (a local .pth or .safetensors)"


@dataclass(frozen=True)
class Weights:
    """The weights a run starts from: the source it was given (as resolved), the local file and its
    sha256."""

    source: str
    file: str
    sha256: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def is_file_source(source: str) -> bool:
    """Whether ``--pretrained`` names a file rather than a name (torchvision weights names are bare
    identifiers such as ``IMAGENET1K_V2``)."""
    return "/" in source or os.sep in source or source.endswith(WEIGHT_SUFFIXES) or os.path.exists(source)


def resolve_weights(source: str, backbone: str) -> Weights | None:
    """The local file of ``--pretrained SOURCE`` for ``backbone``, downloaded when needed; None for
    ``none``. Raises ``OptionError`` (one line: what was tried, the cache, the ways out)."""
    if source == NONE:
        return None
    what = f"--pretrained {source}"
    if source == IMAGENET:
        source = backbone_spec(backbone).imagenet
        what += f" (the ImageNet-1k weights of {backbone}, {source})"
    if source.startswith(HF_PREFIX):  # before the file test: a repository id holds a "/"
        path = _fetch_from_hub(source[len(HF_PREFIX) :], what)
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


def _fetch_from_hub(repo_id: str, what: str) -> Path:
    """The weights file of a Hugging Face Hub model repository, from the hub's cache or downloaded
    into it (huggingface_hub locks its cache, so concurrent launching processes download once).

    The cache is read first without any network. Only a file missing there is downloaded, after one
    short request shows that the Hub answers: huggingface_hub itself retries a connection that
    fails five times with growing pauses (25 s of "Retrying in N s" lines before its error)."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    cached = _hub_file_in_cache(repo_id)
    if cached is not None:
        return cached
    missing = (
        f"{what}: {HF_FILES[0]} is not in the Hugging Face cache {constants.HF_HUB_CACHE} and cannot be downloaded"
    )
    ways_out = f"download it once where there is a network (HF_HOME selects the cache), or {_WAYS_OUT}"
    if constants.HF_HUB_OFFLINE:
        raise OptionError(f"{missing} (HF_HUB_OFFLINE is set); {ways_out}")
    unreachable = _hub_unreachable(constants.ENDPOINT)
    if unreachable:
        raise OptionError(f"{missing} ({constants.ENDPOINT} does not answer: {unreachable}); {ways_out}")
    for filename in HF_FILES:
        try:
            return Path(hf_hub_download(repo_id, filename))
        except LocalEntryNotFoundError:
            raise OptionError(f"{missing} (the connection failed during the download); {ways_out}") from None
        except EntryNotFoundError:
            continue  # the repository exists but stores its weights under the next name
        except Exception as e:  # noqa: BLE001 - unknown repository, gated, network: one line
            raise OptionError(
                f"{what}: cannot fetch it from the Hugging Face Hub ({error_line(e)}); {_WAYS_OUT}"
            ) from None
    raise OptionError(f"{what}: the repository holds none of {', '.join(HF_FILES)}; {_WAYS_OUT}")


def _hub_file_in_cache(repo_id: str) -> Path | None:
    """The repository's weights file in the Hugging Face cache, found without the network."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    for filename in HF_FILES:
        try:
            return Path(hf_hub_download(repo_id, filename, local_files_only=True))
        except (EntryNotFoundError, FileNotFoundError):  # LocalEntryNotFoundError is both
            continue
    return None


def _hub_unreachable(endpoint: str) -> str | None:
    """Why ``endpoint`` does not answer one HEAD request within ``HUB_PROBE_SECONDS`` (through
    huggingface_hub's own HTTP client: its proxies and certificates); None when it answers, with
    any status."""
    from huggingface_hub import get_session

    try:
        get_session().head(endpoint, timeout=HUB_PROBE_SECONDS)
    except Exception as e:  # noqa: BLE001 - refused, no route, DNS, timeout, TLS: the Hub cannot be had
        return error_line(e)
    return None


def _fetch_from_torchvision(backbone: str, name: str, what: str) -> Path:
    """torchvision's weights ``name`` for ``backbone``, from torch's hub cache or downloaded into it."""
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
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock"):  # the launching processes of one node download once
        if not path.is_file():
            try:
                torch.hub.download_url_to_file(url, str(path), hash_prefix=_hash_prefix(path.name), progress=True)
            except Exception as e:  # noqa: BLE001 - offline, proxy, disk: one line
                raise OptionError(
                    f"{what}: cannot download {url} into torch's cache {cache} ({error_line(e)}); "
                    f"put the file there (TORCH_HOME selects the cache), or {_WAYS_OUT}"
                ) from None
    return path


def _hash_prefix(filename: str) -> str | None:
    # torchvision names its files name-<first hex digits of the sha256>.pth, as torch.hub checks
    match = re.search(r"-([a-f0-9]*)\.", filename)
    return match.group(1) if match else None
