"""Where weights come from: ``--pretrained`` (``imagenet``, ``none``, a file read without unpickling code, a
torchvision weights name or ``hf-hub:ORG/NAME[@REVISION]``) and the Hub files of ``--checkpoint hf-hub:...``.
``resolve_weights`` runs in the launching process, once per node before any worker starts: it downloads what
is missing and returns the local file and its sha256, which the run records; workers only read that file.
Hub files come through huggingface_hub's cache (``HF_HOME``; its lock makes concurrent launching processes
download once), read first; ``HF_HUB_OFFLINE=1`` reads only the cache."""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from itertools import chain
from pathlib import Path
from urllib.parse import urlparse

from filelock import FileLock
from torch import nn

from ..checkpoint_io import load_checkpoint
from ..errors import CheckpointError, OptionError, error_line
from .backbones import backbone_spec, is_timm
from .key_layouts import backbone_state_dict_from_any, strict_load
from .timm_backbone import TimmBackbone, imagenet_weights

NONE = "none"
IMAGENET = "imagenet"
HF_PREFIX = "hf-hub:"
HUB_PROBE_SECONDS = 5
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


def is_hub_source(source: str) -> bool:
    """Whether ``source`` names a Hub repository (``hf-hub:ORG/NAME[@REVISION]``)."""
    return source.startswith(HF_PREFIX)


def resolve_weights(source: str, backbone: str) -> Weights | None:
    """The local file of ``--pretrained SOURCE`` for ``backbone``, downloaded when needed; None for ``none``."""
    if source == NONE:
        return None
    what = f"--pretrained {source}"
    if source == IMAGENET:
        kind = "timm's ImageNet" if is_timm(backbone) else "the ImageNet-1k"
        source = imagenet_weights(backbone) if is_timm(backbone) else backbone_spec(backbone).imagenet
        what += f" ({kind} weights of {backbone}, {source})"
    if is_hub_source(source):  # before the file test: a repository id holds a "/"
        path = _fetch_from_hub(source, what)
    elif "/" in source or os.sep in source or source.endswith(WEIGHT_SUFFIXES) or os.path.exists(source):
        # a file: torchvision weights names are bare identifiers
        path = Path(source).expanduser().resolve()
        if not path.is_file():
            raise OptionError(f"{what}: no such file")
    else:
        path = _fetch_from_torchvision(backbone, source, what)
    return Weights(source=source, file=str(path), sha256=sha256_of(path))


def load_backbone_weights(backbone: nn.Module, file: str | Path) -> None:
    """Load a backbone state_dict file of any layout (a timm backbone's: a timm checkpoint); a ``ValueError``
    line lists missing / unexpected keys."""
    try:
        state = load_checkpoint(file, what="weights file")
    except CheckpointError as e:
        raise ValueError(str(e)) from None
    if isinstance(backbone, TimmBackbone):
        backbone.load_timm_weights(state, f"backbone weights {file}")
    else:
        strict_load(backbone, backbone_state_dict_from_any(state), f"backbone weights {file}")


def sha256_of(path: str | Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _fetch_from_hub(source: str, what: str) -> Path:
    # the first of HF_FILES the repository holds; any of them in the cache before the network
    cached = (cached_hub_file(source, filename) for filename in HF_FILES)
    fetched = (fetch_hub_file(source, filename, what, _WAYS_OUT) for filename in HF_FILES)
    path = next((path for path in chain(cached, fetched) if path is not None), None)
    if path is None:
        raise OptionError(f"{what}: the repository holds none of {', '.join(HF_FILES)}; {_WAYS_OUT}")
    return path


def _fetch_from_torchvision(backbone: str, name: str, what: str) -> Path:
    import torch.hub
    from torchvision.models import get_model_weights

    if is_timm(backbone):
        raise OptionError(
            f"{what}: not a file; a timm backbone takes '{IMAGENET}' (timm's weights), '{NONE}', a file (a timm "
            f"checkpoint) or {HF_PREFIX}ORG/NAME"
        )
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
    hash_prefix = match.group(1) if (match := torch.hub.HASH_REGEX.search(path.name)) else None
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


def parse_hub_source(source: str) -> tuple[str, str | None]:
    """``(repo_id, revision)`` of ``hf-hub:ORG/NAME[@REVISION]`` (revision None: ``main``); ValueError if malformed."""
    repo_id, at, revision = source[len(HF_PREFIX) :].partition("@")
    if not repo_id or (at and not revision):
        raise ValueError(f"expected {HF_PREFIX}ORG/NAME or {HF_PREFIX}ORG/NAME@REVISION")
    return repo_id, revision or None


def cached_hub_file(source: str, filename: str) -> Path | None:
    """``filename`` of the repository ``source`` from the cache alone; None if not there or ``source`` is malformed."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        repo_id, revision = parse_hub_source(source)
        return Path(hf_hub_download(repo_id, filename, revision=revision, local_files_only=True))
    except (ValueError, EntryNotFoundError, FileNotFoundError):  # LocalEntryNotFoundError is both
        return None


def fetch_hub_file(source: str, filename: str, what: str, ways_out: str) -> Path | None:
    """The local path of ``filename`` in the repository ``source``, from the cache or downloaded into it; None
    when the repository (at that revision) has no such file. ``OptionError``: ``what``, why, ``ways_out``."""
    from huggingface_hub import constants, get_session, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    try:
        repo_id, revision = parse_hub_source(source)
    except ValueError as e:
        raise OptionError(f"{what}: {e}") from None
    cached = cached_hub_file(source, filename)
    if cached is not None:
        return cached
    missing = f"{what}: {filename} is not in the Hugging Face cache {constants.HF_HUB_CACHE} and cannot be downloaded"
    ways = f"download it once where there is a network (HF_HOME selects the cache), or {ways_out}"
    if constants.HF_HUB_OFFLINE:
        raise OptionError(f"{missing} (HF_HUB_OFFLINE is set); {ways}")
    # one short request first: huggingface_hub retries a failing connection five times with growing
    # pauses (23.5 s and six "Retrying in N s" lines before its error)
    try:
        get_session().head(constants.ENDPOINT, timeout=HUB_PROBE_SECONDS)  # its proxies and certificates
    except Exception as e:  # noqa: BLE001 - refused, no route, DNS, timeout, TLS: the Hub cannot be had
        raise OptionError(f"{missing} ({constants.ENDPOINT} does not answer: {error_line(e)}); {ways}") from None
    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision))
    except LocalEntryNotFoundError:  # before EntryNotFoundError, its base class
        raise OptionError(f"{missing} (the connection failed during the download); {ways}") from None
    except EntryNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 - unknown repository or revision, gated, network: one line
        raise OptionError(f"{what}: cannot fetch it from the Hugging Face Hub ({error_line(e)}); {ways_out}") from None
