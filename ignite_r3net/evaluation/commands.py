"""``evaluate`` and ``predict`` on the command line.

* ``evaluate --checkpoint CKPT --data DIR ...``: full-resolution inference (batch 1, each image at
  its own size) on one or many processes, one table row and one JSON entry per data set. Every
  rank scores an unpadded shard and the metrics all-reduce, so N processes score what 1 does.
* ``evaluate --maps DIR --gt DIR``: scores saliency maps already on disk (any method's).
* ``predict --checkpoint CKPT --input ... --output DIR``: writes one 8-bit PNG per input image.

Everything a user can get wrong (paths, checkpoint, backbone, missing extra) is checked in the
launching process before any worker starts, so it fails with one line instead of N tracebacks.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import error_line
from .maps import dataset_names, output_path

__all__ = [
    "add_evaluation_commands",
    "run_evaluate",
    "run_predict",
    "model_state_from_checkpoint",
    "infer_backbone",
    "resolve_backbone",
    "format_table",
]

COLUMNS = ("mae", "maxF", "meanF", "adpF", "Sm", "maxE", "meanE", "adpE", "wF")
_LIST_LIMIT = 20  # file names shown in one warning before "(+N more)"


# ------------------------------------------------------------------------------------------
# argument parsing


def add_evaluation_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``evaluate`` and ``predict`` on the CLI's subparsers."""
    ev = sub.add_parser(
        "evaluate",
        help="score a checkpoint on data sets, or existing saliency maps against masks",
        description="Score a checkpoint on one or more data sets (full resolution, batch 1), or score "
        "saliency maps already on disk (--maps/--gt). Prints one row per data set.",
    )
    src = ev.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--checkpoint", help="training checkpoint, best_model_*.pt, or an original R3Net release state_dict"
    )
    src.add_argument("--maps", help="folder of saliency maps (PNG/JPG/BMP, any method's) to score; needs --gt")
    ev.add_argument(
        "--data", nargs="+", metavar="DIR", help="data set folders (MSRA10K or DUTS layout); with --checkpoint"
    )
    ev.add_argument("--gt", metavar="DIR", help="folder of ground-truth masks matched to --maps by file stem")
    ev.add_argument(
        "--protocol",
        choices=("standard", "r3net"),
        default="standard",
        help="'standard' = PySODMetrics; 'r3net' = the original R3Net code's mae and maxF",
    )
    ev.add_argument("--json", metavar="FILE", help="also write the numbers as JSON keyed by data set name")
    _add_model_options(ev)
    ev.add_argument("--save-maps", metavar="OUT", help="write each map as OUT/<dataset>/<stem>.png")
    ev.add_argument(
        "--nproc", type=int, default=1, help="processes to spawn (one per GPU with NCCL, CPU processes with gloo)"
    )
    ev.add_argument(
        "--backend",
        choices=("nccl", "gloo"),
        default=None,
        help="distributed backend; default: nccl when CUDA is available, else gloo",
    )
    ev.add_argument("--master-port", type=int, default=None, help="rendezvous port; default: a free port")
    ev.set_defaults(handler=run_evaluate)

    pr = sub.add_parser(
        "predict",
        help="write saliency maps for images",
        description="Write an 8-bit PNG saliency map, at the input's own size and with its stem, for "
        "every input image (files, or every image directly inside a folder).",
    )
    pr.add_argument(
        "--checkpoint",
        required=True,
        help="training checkpoint, best_model_*.pt, or an original R3Net release state_dict",
    )
    pr.add_argument(
        "--input",
        nargs="+",
        required=True,
        metavar="PATH",
        help="image files and/or folders (images directly inside, sorted)",
    )
    pr.add_argument("--output", required=True, metavar="DIR", help="folder for the maps")
    _add_model_options(pr)
    pr.set_defaults(handler=run_predict)


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backbone",
        default=None,
        help="backbone of the checkpoint; default: config.json beside it, else inferred from its weights",
    )
    parser.add_argument(
        "--crf",
        action="store_true",
        help="refine maps with a dense CRF (original R3Net parameters); needs the crf extra",
    )
    parser.add_argument("--amp", choices=("off", "bf16"), default="off", help="mixed precision inference")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes per process")


def _command_error(message: str) -> Exception:
    from ..cli import CommandError  # imported here: cli imports this module

    return CommandError(message)


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _listing(paths: Iterable[Path | str]) -> str:
    names = [str(p) for p in paths]
    shown = ", ".join(names[:_LIST_LIMIT])
    return shown + (f" (+{len(names) - _LIST_LIMIT} more)" if len(names) > _LIST_LIMIT else "")


# ------------------------------------------------------------------------------------------
# checkpoints and backbones


def model_state_from_checkpoint(obj: Mapping[str, Any], path: str | Path) -> dict[str, torch.Tensor]:
    """The model state_dict inside any checkpoint we accept: a training checkpoint (``"model"``
    entry), a best checkpoint or an original release (the state_dict itself)."""
    if isinstance(obj.get("model"), Mapping):
        obj = obj["model"]
    state = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not state or len(state) != len(obj):
        from ..training.checkpoint import CheckpointError

        raise CheckpointError(f"checkpoint {path} holds no model state_dict (keys: {_listing(list(obj)[:5])})")
    return state


def infer_backbone(state: Mapping[str, torch.Tensor]) -> str | None:
    """The backbone name whose shape matches ``state`` (any accepted layout), or None.

    Cheap: counts the blocks of each stage and reads the grouping of the first 3x3 convolution,
    which tells every backbone in ``BACKBONES`` apart.
    """
    from ..model import BACKBONES, to_our_layout

    try:
        sd = to_our_layout(state)
    except ValueError:
        return None
    layers = []
    for stage in range(1, 5):
        prefix = f"backbone.layer{stage}."
        blocks = {k[len(prefix) :].split(".", 1)[0] for k in sd if k.startswith(prefix)}
        layers.append(len(blocks))
    bottleneck = "backbone.layer1.0.conv3.weight" in sd
    conv2 = sd.get("backbone.layer1.0.conv2.weight")
    if conv2 is None or conv2.dim() != 4:
        return None
    # conv2 of the first block is (width, width / groups, 3, 3) with width = groups * width_per_group
    groups, per_group = conv2.shape[0] // conv2.shape[1], conv2.shape[1]
    for name, spec in BACKBONES.items():
        if tuple(layers) != tuple(spec.layers) or (spec.block.__name__ == "Bottleneck") != bottleneck:
            continue
        if not bottleneck or (spec.groups, spec.width_per_group) == (groups, per_group):
            return name
    return None


def resolve_backbone(requested: str | None, checkpoint: str | Path, state: Mapping[str, torch.Tensor]) -> str:
    """``--backbone``, else ``config.json`` beside the checkpoint, else inferred from the weights."""
    if requested:
        return requested
    config = Path(checkpoint).parent / "config.json"
    if config.is_file():
        from ..config import TrainConfig

        try:
            name = TrainConfig.load(config).backbone
        except (OSError, ValueError, TypeError, AttributeError):
            name = None
        if isinstance(name, str) and name:
            return name
    name = infer_backbone(state)
    if name is None:
        raise _command_error(f"cannot tell the backbone of {checkpoint}: pass --backbone")
    return name


def _check_model(backbone: str, state: Mapping[str, torch.Tensor], checkpoint: str | Path) -> None:
    """Load ``state`` into an R3Net built on the meta device: a mismatch is found without
    allocating the real model."""
    from ..model import BACKBONES, R3Net, load_model_state

    if backbone not in BACKBONES:
        raise _command_error(f"unknown --backbone {backbone!r}; valid names: {', '.join(sorted(BACKBONES))}")
    with torch.device("meta"):
        model = R3Net(backbone)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "copying into a meta parameter is a no-op": intended
            load_model_state(model, state)
    except (ValueError, RuntimeError) as e:
        first = error_line(e)
        raise _command_error(
            f"checkpoint {checkpoint} does not fit backbone {backbone} (wrong --backbone?): {first}"
        ) from None


def _load_state(checkpoint: str | Path) -> dict[str, torch.Tensor]:
    from ..training.checkpoint import load_checkpoint

    return model_state_from_checkpoint(load_checkpoint(checkpoint), checkpoint)


def build_model(backbone: str, state: Mapping[str, torch.Tensor], device: torch.device) -> torch.nn.Module:
    """R3Net with ``state`` loaded, in eval mode on ``device``."""
    from ..model import R3Net, load_model_state

    model = R3Net(backbone)
    load_model_state(model, state)
    return model.to(device).eval()


# ------------------------------------------------------------------------------------------
# output


def format_table(rows: Mapping[str, Mapping[str, float]]) -> str:
    """A plain-text table: one row per data set, the image count and the nine metrics."""
    header = ["dataset", "images", *COLUMNS]
    body = [[name, str(int(r["images"]))] + [f"{r[c]:.4f}" for c in COLUMNS] for name, r in rows.items()]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
        for line in [header, *body]
    ]
    return "\n".join(lines)


def _report(rows: dict[str, dict[str, float]], json_path: str | None) -> None:
    print(format_table(rows), flush=True)
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)  # a reader never sees half a file


def _check_writable_file(path: str | None, option: str) -> None:
    """Fail before the work whose result would be lost when the file cannot be written."""
    if not path:
        return
    if Path(path).is_dir():
        raise _command_error(f"{option} {path} is a folder; give a file name")
    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _command_error(f"{option} {path}: cannot create {parent}: {e.strerror or e}") from None
    if not os.access(parent, os.W_OK):
        raise _command_error(f"{option} {path}: {parent} is not writable")


# ------------------------------------------------------------------------------------------
# evaluate --checkpoint


@dataclass
class EvalJob:
    """Everything a worker needs; picklable, so spawned workers receive it."""

    checkpoint: str
    backbone: str
    datasets: list[tuple[str, str]]  # (name, folder)
    protocol: str = "standard"
    save_maps: str | None = None
    json_path: str | None = None
    crf: bool = False
    amp: str = "off"
    workers: int = 0
    # the already-loaded state when the job runs in this process (None: workers read the file)
    state: dict[str, torch.Tensor] | None = field(default=None, repr=False)


def run_evaluate(args: argparse.Namespace) -> int:
    """Handler of ``evaluate``."""
    if args.maps is not None:
        return _evaluate_maps(args)
    if args.gt is not None:
        raise _command_error("--gt goes with --maps; with --checkpoint give the data sets as --data")
    if not args.data:
        raise _command_error("--checkpoint needs --data DIR [DIR ...]")
    job = _prepare_job(args)
    return _launch_evaluation(job, args.nproc, args.backend, args.master_port)


def _prepare_job(args: argparse.Namespace) -> EvalJob:
    from ..data import assert_dataset_ok

    if args.nproc < 1:
        raise _command_error(f"--nproc must be >= 1, got {args.nproc}")
    if args.workers < 0:
        raise _command_error(f"--workers must be >= 0, got {args.workers}")
    if args.crf:
        from .crf import require_crf

        require_crf()
    _check_writable_file(args.json, "--json")
    for folder in args.data:
        assert_dataset_ok(folder)  # DataError listing every problem (headers read), before any work
    state = _load_state(args.checkpoint)
    backbone = resolve_backbone(args.backbone, args.checkpoint, state)
    _check_model(backbone, state, args.checkpoint)
    names = dataset_names(args.data)
    if args.save_maps:
        out = Path(args.save_maps)
        if out.exists() and not out.is_dir():
            raise _command_error(f"--save-maps {out} exists and is not a folder")
        for name in names:
            (out / name).mkdir(parents=True, exist_ok=True)  # here, so ranks never race on it
    return EvalJob(
        checkpoint=str(args.checkpoint),
        backbone=backbone,
        datasets=[(n, str(f)) for n, f in zip(names, args.data)],
        protocol=args.protocol,
        save_maps=args.save_maps,
        json_path=args.json,
        crf=args.crf,
        amp=args.amp,
        workers=args.workers,
        state=state,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch_evaluation(job: EvalJob, nproc: int, backend: str | None, master_port: int | None) -> int:
    from ..launch import LaunchSpec, launch, under_torchrun

    spec = LaunchSpec(nproc=nproc, backend=backend, master_port=master_port or _free_port())
    if spec.spawns() or under_torchrun():
        job.state = None  # each worker reads the file rather than receive 200 MB through a pipe
    launch(_evaluate_worker, job, spec)
    return 0


def _evaluate_worker(local_rank: int, job: EvalJob) -> None:
    """Runs on every rank: score each data set on this rank's shard; rank 0 reports."""
    import ignite.distributed as idist

    device = idist.device()
    state = job.state if job.state is not None else _load_state(job.checkpoint)
    model = build_model(job.backbone, state, device)
    del state
    rows: dict[str, dict[str, float]] = {}
    for name, folder in job.datasets:
        rows[name] = _evaluate_dataset(model, device, name, folder, job)
    if idist.get_rank() == 0:
        _report(rows, job.json_path)
        if job.save_maps:
            print(f"maps written to {job.save_maps}", flush=True)


def _evaluate_dataset(
    model: torch.nn.Module, device: torch.device, name: str, folder: str, job: EvalJob
) -> dict[str, float]:
    import ignite.distributed as idist
    from ignite.engine import Engine, Events

    from ..data import build_eval_loader
    from ..metrics import SaliencyMetrics
    from .evaluator import attach_scoring, create_evaluator, score_shard

    loader = build_eval_loader(folder, idist.get_world_size(), idist.get_rank(), job.workers)
    evaluator = create_evaluator(model, device, job.amp)

    # Handlers run in the order they are added: refine, then save, then score the refined map.
    if job.crf:
        from .crf import crf_refine

        @evaluator.on(Events.ITERATION_COMPLETED)
        def refine(engine: Engine) -> None:
            maps, gts = engine.state.output
            images = engine.state.batch["image"]
            engine.state.output = ([crf_refine(img, m) for img, m in zip(images, maps)], gts)

    if job.save_maps:
        out_dir = Path(job.save_maps) / name

        @evaluator.on(Events.ITERATION_COMPLETED)
        def save(engine: Engine) -> None:
            from .maps import save_map

            for stem, saliency in zip(engine.state.names, engine.state.output[0]):
                save_map(output_path(out_dir, stem), saliency)

    metric = SaliencyMetrics(device=device, protocol=job.protocol)
    attach_scoring(evaluator, metric)
    values = score_shard(evaluator, loader, metric)
    return {"images": len(loader.dataset), **{k: float(values[k]) for k in COLUMNS}}


# ------------------------------------------------------------------------------------------
# evaluate --maps


def _evaluate_maps(args: argparse.Namespace) -> int:
    from ..data import load_mask
    from ..metrics import SaliencyMetrics
    from .maps import load_saliency_map, match_maps, resize_map

    if args.gt is None:
        raise _command_error("--maps needs --gt DIR (the ground-truth masks)")
    if args.data:
        raise _command_error("--data goes with --checkpoint; with --maps give the masks as --gt")
    for option in ("save_maps", "crf"):
        if getattr(args, option):
            raise _command_error(f"--{option.replace('_', '-')} needs --checkpoint (it acts on predictions)")
    _check_writable_file(args.json, "--json")
    match = match_maps(args.maps, args.gt)
    if match.maps_without_mask:
        _warn(
            f"{len(match.maps_without_mask)} map(s) without a mask in {args.gt}, skipped: "
            f"{_listing(p.name for p in match.maps_without_mask)}"
        )
    if match.masks_without_map:
        _warn(
            f"{len(match.masks_without_map)} mask(s) without a map in {args.maps}, skipped: "
            f"{_listing(p.name for p in match.masks_without_map)}"
        )
    if not match.pairs:
        raise _command_error(f"no map in {args.maps} matches a mask in {args.gt} by file name")

    metric = SaliencyMetrics(protocol=args.protocol)
    resized: list[str] = []
    for _stem, map_path, mask_path in match.pairs:
        gt = load_mask(mask_path)[0]
        saliency = load_saliency_map(map_path)
        if saliency.shape != gt.shape:
            # the toolboxes need equal sizes; a map saved at another size is resized to its mask
            saliency = resize_map(saliency, tuple(gt.shape))
            resized.append(map_path.name)
        metric.update(([saliency], [gt]))
    if resized:
        _warn(f"{len(resized)} map(s) resized (bilinear) to their mask's size: {_listing(resized)}")
    values = metric.compute()
    name = dataset_names([args.gt])[0]
    _report({name: {"images": len(match.pairs), **{k: float(values[k]) for k in COLUMNS}}}, args.json)
    return 0


# ------------------------------------------------------------------------------------------
# predict


def collect_inputs(inputs: Iterable[str]) -> list[Path]:
    """Image files as given, and the images directly inside each folder (sorted by name)."""
    from ..data import IMAGE_EXTS

    found: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            images = sorted(
                f for f in p.iterdir() if f.is_file() and not f.name.startswith(".") and f.suffix.lower() in IMAGE_EXTS
            )
            if not images:
                raise _command_error(f"--input folder {p} holds no images ({', '.join(IMAGE_EXTS)})")
            # An MSRA10K-style data set folder holds name.jpg beside its mask name.png: as in the
            # data loader's side-by-side layout, the .png of such a pair is the mask, not an input.
            stems_with_other = {f.stem for f in images if f.suffix.lower() != ".png"}
            found.extend(f for f in images if not (f.suffix.lower() == ".png" and f.stem in stems_with_other))
        elif p.is_file():
            found.append(p)
        else:
            raise FileNotFoundError(f"--input {p} does not exist")
    return found


def plan_outputs(inputs: list[Path], out_dir: str | Path) -> list[tuple[Path, Path]]:
    """(input, output PNG) pairs inside ``out_dir``; two inputs that would write one file are an
    error naming both, rather than one map silently replacing the other."""
    planned: dict[Path, Path] = {}
    pairs = []
    for src in inputs:
        dst = output_path(out_dir, src.stem)
        if dst in planned:
            if planned[dst].resolve() == src.resolve():
                continue  # the same file given twice (as a file and through its folder)
            raise _command_error(
                f"--input {planned[dst]} and {src} would both be written to {dst}; "
                "rename one or predict them into separate --output folders"
            )
        planned[dst] = src
        pairs.append((src, dst))
    return pairs


class _ImageFiles(torch.utils.data.Dataset):
    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        from ..data import load_image

        return load_image(self.paths[index])


def _first(batch: list[torch.Tensor]) -> torch.Tensor:
    return batch[0]


def run_predict(args: argparse.Namespace) -> int:
    """Handler of ``predict``."""
    from ..data import init_loader_worker
    from .evaluator import predict_maps
    from .maps import save_map

    if args.workers < 0:
        raise _command_error(f"--workers must be >= 0, got {args.workers}")
    if args.crf:
        from .crf import require_crf

        require_crf()
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise _command_error(f"--output {out} exists and is not a folder")
    pairs = plan_outputs(collect_inputs(args.input), out)
    state = _load_state(args.checkpoint)
    backbone = resolve_backbone(args.backbone, args.checkpoint, state)
    _check_model(backbone, state, args.checkpoint)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model(backbone, state, device)
    del state
    out.mkdir(parents=True, exist_ok=True)

    loader = torch.utils.data.DataLoader(
        _ImageFiles([src for src, _ in pairs]),
        batch_size=1,
        num_workers=args.workers,
        collate_fn=_first,
        worker_init_fn=init_loader_worker,
    )
    for (_src, dst), image in zip(pairs, loader):
        saliency = predict_maps(model, image[None].to(device), args.amp)[0]
        if args.crf:
            from .crf import crf_refine

            saliency = crf_refine(image, saliency)
        save_map(dst, saliency)
    print(f"wrote {len(pairs)} map(s) to {out}")
    return 0
