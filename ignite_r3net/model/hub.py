"""Files of Hugging Face Hub repositories, ``hf-hub:ORG/NAME[@REVISION]``: the one fetcher behind
``--pretrained hf-hub:...`` and ``--checkpoint hf-hub:...`` (a folder of ``export --format hub``).

``huggingface_hub`` fetches into its cache (``HF_HOME``; its lock makes concurrent launching
processes download once), which is read first; ``HF_HUB_OFFLINE=1`` reads only the cache. Any
failure is one ``OptionError`` line.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import OptionError, error_line

HF_PREFIX = "hf-hub:"
HUB_PROBE_SECONDS = 5


def is_hub_source(source: str) -> bool:
    """Whether ``source`` names a Hub repository (``hf-hub:ORG/NAME[@REVISION]``)."""
    return source.startswith(HF_PREFIX)


def parse_hub_source(source: str) -> tuple[str, str | None]:
    """``(repo_id, revision)`` of ``hf-hub:ORG/NAME[@REVISION]``; revision (a branch, tag or commit,
    after the first ``@``: repository ids hold none) None means ``main``. ValueError if a part is empty."""
    repo_id, at, revision = source[len(HF_PREFIX) :].partition("@")
    if not repo_id or (at and not revision):
        raise ValueError(f"expected {HF_PREFIX}ORG/NAME or {HF_PREFIX}ORG/NAME@REVISION")
    return repo_id, revision or None


def cached_hub_file(source: str, filename: str) -> Path | None:
    """``filename`` of the repository ``source`` from the Hugging Face cache alone (no network); None
    when it is not there or ``source`` is malformed."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        repo_id, revision = parse_hub_source(source)
        return Path(hf_hub_download(repo_id, filename, revision=revision, local_files_only=True))
    except (ValueError, EntryNotFoundError, FileNotFoundError):  # LocalEntryNotFoundError is both
        return None


def fetch_hub_file(source: str, filename: str, what: str, ways_out: str) -> Path | None:
    """The local path of ``filename`` in the repository ``source``, from the Hugging Face cache or
    downloaded into it; None when the repository (at that revision) has no such file. Raises a
    one-line ``OptionError``: ``what`` (the option and its value), why, the cache and ``ways_out``."""
    from huggingface_hub import constants, hf_hub_download
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
    unreachable = _hub_unreachable(constants.ENDPOINT)
    if unreachable:
        raise OptionError(f"{missing} ({constants.ENDPOINT} does not answer: {unreachable}); {ways}")
    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision))
    except LocalEntryNotFoundError:  # before EntryNotFoundError, its base class
        raise OptionError(f"{missing} (the connection failed during the download); {ways}") from None
    except EntryNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 - unknown repository or revision, gated, network: one line
        raise OptionError(f"{what}: cannot fetch it from the Hugging Face Hub ({error_line(e)}); {ways_out}") from None


def _hub_unreachable(endpoint: str) -> str | None:
    """Why ``endpoint`` does not answer a HEAD request in ``HUB_PROBE_SECONDS``; None when it answers
    with any status. huggingface_hub's HTTP client: its proxies and certificates."""
    from huggingface_hub import get_session

    try:
        get_session().head(endpoint, timeout=HUB_PROBE_SECONDS)
    except Exception as e:  # noqa: BLE001 - refused, no route, DNS, timeout, TLS: the Hub cannot be had
        return error_line(e)
    return None
