"""The options of ``serve``: which model answers, where it listens, how requests are batched and what is refused."""

from __future__ import annotations

from dataclasses import dataclass

from .common import CHECKPOINT_HELP, COLOUR_EXAMPLES, DEVICES, MODEL_HELP, TF32_HELP, InferenceOptions
from .fields import NOT_NEGATIVE, POSITIVE, POSITIVE_COUNT, Rule, check_fields, group, option

_PORT = Rule(lambda v: 0 <= v <= 65535, "must be a TCP port (1-65535), or 0 for a free one")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(kw_only=True)
class ServeOptions:
    """Everything ``serve`` is asked to do: the model, the address, the batching and the limits."""

    checkpoint: str | None = option(None, CHECKPOINT_HELP, one_of="source")
    model: str | None = option(None, MODEL_HELP, one_of="source", metavar="FILE")
    # each request asks its own ?max_side= and ?crf=true
    inference: InferenceOptions = group(
        InferenceOptions,
        omit=("size", "max_side", "crf", "workers"),
        amp="mixed precision inference for --checkpoint: bf16 runs the model in bfloat16 (maps may differ by a gray "
        "level); off: float32",
        tf32=TF32_HELP + "; off gives the maps closest to the CPU's",
    )
    host: str = option(
        "127.0.0.1",
        "address to listen on: 127.0.0.1 answers this machine only; another (0.0.0.0: every interface) lets other "
        "machines in, without any authentication, which the start-up line says",
        metavar="ADDR",
    )
    port: int = option(8000, "TCP port to listen on (0: a free port, printed at start)", rule=_PORT)
    device: str = option(
        "auto",
        "where the model runs: cuda = the first visible GPU, cpu = the CPU (even on a GPU host), auto = cuda when "
        "a GPU is visible, else cpu",
        choices=DEVICES,
    )
    background: str | None = option(
        None,
        f"composite every cutout (?output=cutout) over COLOR ({COLOUR_EXAMPLES}) or over the image FILE (scaled "
        "to cover the photo, centred) into an RGB PNG, unless the request asks ?background=none (transparent) or "
        "another colour; default: none (RGBA cutouts)",
        metavar="COLOR|FILE",
    )
    max_batch: int = option(
        8,
        "images run together in one forward pass, at most N (and no more pixels than N 400x300 images): requests "
        "arriving within --max-wait-ms of each other are grouped by image size (and ?max_side=), each group one "
        "batch, as predict batches; images of other sizes are never padded into one batch, which would change "
        "their maps; 1 turns batching off",
        rule=POSITIVE_COUNT,
    )
    max_wait_ms: float = option(
        5.0,
        "how long the first request of a batch waits for others to join it, in milliseconds (0: only those "
        "already waiting join)",
        rule=NOT_NEGATIVE,
        metavar="MS",
    )
    max_upload_mb: float = option(
        20.0,
        "largest upload accepted, in megabytes (10^6 bytes); a larger one is answered 413 without being read further",
        rule=POSITIVE,
        metavar="MB",
    )
    max_pixels: int = option(
        40_000_000,
        "largest image accepted, in pixels (width x height, read from the file's header before it is decoded); a "
        "larger one, such as a decompression bomb (a small file that decodes to gigabytes), is answered 413",
        rule=POSITIVE_COUNT,
    )
    queue_size: int = option(
        32,
        "requests taken at once (being read, waiting for the model, running, being encoded); one more is "
        "answered 503 with Retry-After at once rather than join an unbounded backlog",
        rule=POSITIVE_COUNT,
    )

    def validate(self) -> None:
        check_fields(self)
        self.inference.check_model(self.checkpoint, self.model)

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1_000_000)

    @property
    def source(self) -> str:
        """The model as given: the checkpoint or the exported file."""
        source = self.checkpoint if self.checkpoint is not None else self.model
        assert source is not None  # validate(): one of them
        return source
