"""``predict``: an 8-bit PNG saliency map (or an RGBA cutout) per image, at its own size and with its
stem, from a checkpoint or an exported file. Every mistake is found here before any worker starts; the
maps already made by the same model and options are kept; failed images are listed and exit with 1.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..atomic_files import check_writable_folder
from ..console import echo
from ..data.folder import IMAGE_EXTS, dataset_of_half, split_dirs
from ..distributed.launch import launch
from ..distributed.topology import LaunchSpec, rank_set_by_launcher
from ..errors import DataError, ImagesFailed, OptionError, listing, note
from ..inference.crf import require_crf
from ..inference.cutout import parse_colour, read_background
from ..inference.model import is_onnx, load_exported, require_onnxruntime
from ..model.backbone_weights import sha256_of
from ..model.trained_model import TrainedWeights, read_trained_weights
from ..options import PredictOptions
from ..options.fields import option_fields, values_by_flag
from ..options.predict import PREDICT_NOT_PIXELS
from ..run_lock import claimed_folder
from .maps import output_path
from .predict_worker import RECORD_DIR, MapRecord, PredictJob, predict_worker, run_description, run_key

_SHOWN = 20  # failed images listed in the error; all of them go to OUTPUT/.predict/failed.txt


def predict(options: PredictOptions) -> dict[str, Any]:
    """A map (or cutout) per input image into ``options.output``, but for those already made by the same
    model and options (unless ``--overwrite``); returns ``written``, ``kept``, ``failed`` and ``seconds``.
    Raises ``OptionError``, ``CheckpointError``, ``ImagesFailed`` (the other maps were written) and
    ``WorkerFailed``."""
    options.validate()
    options = replace(options, processes=options.processes.on_device())
    if options.model is not None and is_onnx(options.model):
        require_onnxruntime()
    if options.inference.crf:
        require_crf()
    if options.background is not None:
        read_background(options.background)
    if options.processes.nproc > 1 and rank_set_by_launcher():
        raise OptionError("--nproc spawns processes; under torchrun, leave it out (torchrun gives the ranks)")
    out = Path(options.output)
    check_writable_folder(out, "--output")
    pairs = plan_outputs(collect_inputs(options.inputs), out, ".jpg" if options.jpeg else ".png")
    weights: TrainedWeights | None = None  # the model is read here: a bad file is one line before any work
    if options.model is not None:
        load_exported(options.model, "cpu")
    else:
        assert options.checkpoint is not None
        weights = read_trained_weights(options.checkpoint, options.inference.backbone)
        # the backbone the weights fit, whether given or found
        options = replace(options, inference=replace(options.inference, backbone=weights.backbone))
    model_file = options.model if weights is None else weights.path  # a hf-hub: checkpoint's local file
    assert model_file is not None  # validate(): exactly one of --checkpoint and --model
    description = run_description(model_file, pixel_options(options))
    record = MapRecord(out, run_key(description))
    spec = options.processes.launch_spec()
    with claimed_folder(out, "--output", spec.is_leader()):
        kept = set() if options.overwrite else record.done(dst.name for _, dst in pairs)
        todo = [(src, dst) for src, dst in pairs if dst.name not in kept]
        if spec.is_leader():
            record.begin(description)
            _announce(len(pairs), len(kept), out, spec)
        outcome = _predict_on_workers(options, todo, record.key, weights, spec) if todo else {}
    outcome = {"written": 0, "failed": [], "seconds": 0.0, **outcome, "kept": len(kept)}
    if spec.is_leader() and todo:
        _report(outcome, len(todo), out, "cutout" if options.cutout else "map")
    return outcome


def pixel_options(options: PredictOptions) -> dict[str, Any]:
    """The options that decide the maps' pixels, by field name: all but ``PREDICT_NOT_PIXELS``, with ``--device``
    resolved (``ProcessOptions.on_device``). ``tf32`` is the TF32 this run uses: on a GPU, TF32 rounds the convolutions'
    inputs to a 10-bit mantissa and moves gray levels, so ``--tf32 on`` and ``off`` make other maps there; on the
    CPU, and in onnxruntime, it does nothing, so a CPU run's maps stay valid for a GPU rerun with ``--tf32 off``."""
    pixels = {f.name: value for f, value in option_fields(options) if f.name not in PREDICT_NOT_PIXELS}
    torch_on_gpu = options.processes.device == "cuda" and not (options.model is not None and is_onnx(options.model))
    pixels["tf32"] = options.inference.tf32 if torch_on_gpu else "off"
    if options.background is not None:  # the colour itself (white and #ffffff alike), or the file's contents
        colour = parse_colour(options.background)
        pixels["background"] = "#" + bytes(colour).hex() if colour else f"sha256 {sha256_of(options.background)}"
    return pixels


def _predict_on_workers(
    options: PredictOptions, todo: list[tuple[Path, Path]], key: str, weights: Any, spec: LaunchSpec
) -> dict[str, Any]:
    spawned = spec.spawns()
    # the maps to make, by name: each node may see the folders at other paths
    names = "\n".join(f"{src.name}\t{dst.name}" for src, dst in todo)
    job = PredictJob(
        options,
        [os.fspath(src) for src, _ in todo],
        [os.fspath(dst) for _, dst in todo],
        key,
        shared={
            "model and options": key,
            **values_by_flag(options, ("batch_size",)),
            "maps to make": f"{len(todo)} (sha256 {hashlib.sha256(names.encode()).hexdigest()[:12]})",
        },
        weights=None if spawned else weights,  # a spawned worker reads the file itself
        outcome_file=os.fspath(Path(options.output) / RECORD_DIR / f"outcome-{os.getpid()}.json") if spawned else None,
    )
    launch(predict_worker, job, spec)
    if job.outcome or job.outcome_file is None:  # the workers ran in this process
        return dict(job.outcome)
    path = Path(job.outcome_file)  # else rank 0 left the outcome in this file
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    finally:
        path.unlink(missing_ok=True)


def _announce(total: int, kept: int, out: Path, spec: LaunchSpec) -> None:
    if kept == total:
        echo(f"all {total} map(s) already in {out} (same model and options); --overwrite redoes them")
    elif kept:
        echo(
            f"{kept} of {total} map(s) already in {out} (same model and options), kept; predicting "
            f"{total - kept} on {spec.world_size} process(es)"
        )


def _report(outcome: dict[str, Any], todo: int, out: Path, noun: str) -> None:
    """The last lines: ``noun``s written and the speed; the images that failed, as one error."""
    seconds, written = outcome["seconds"], outcome["written"]
    rate = f", {written / seconds:.3g} images/s" if seconds > 0 and written else ""
    echo(f"wrote {written} {noun}(s) to {out} in {seconds:.1f} s{rate}")
    failed = outcome["failed"]
    if failed:
        (out / RECORD_DIR / "failed.txt").write_text("".join(f"{line}\n" for line in failed), encoding="utf-8")
        shown = failed[:_SHOWN] + ([f"(+{len(failed) - _SHOWN} more)"] if len(failed) > _SHOWN else [])
        raise ImagesFailed(
            f"{len(failed)} of {todo} image(s) could not be read; their maps are missing, the others were "
            f"written (the list: {out / RECORD_DIR / 'failed.txt'}; a rerun tries them again):\n"
            + "\n".join(f"  - {line}" for line in shown)
        )


def collect_inputs(inputs: Iterable[str]) -> list[Path]:
    """Image files as given, and the images directly inside each folder (sorted by name)."""
    found: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            images = sorted(
                f for f in p.iterdir() if f.is_file() and not f.name.startswith(".") and f.suffix.lower() in IMAGE_EXTS
            )
            if not images:
                raise OptionError(_no_images(p))
            _refuse_masks_half(p, item)
            found.extend(_inputs_of(p, images))
        elif p.is_file():
            found.append(p)
        else:
            raise OptionError(f"--input {p} does not exist")
    return found


def _refuse_masks_half(folder: Path, given: str) -> None:
    # the masks half of a DUTS-layout data set: its masks would be predicted on
    half = dataset_of_half(folder)
    split = split_dirs(half[0]) if half is not None and half[1] == "masks" else None
    if half is not None and split is not None:
        raise OptionError(
            f"--input {given} is the masks folder of the data set {half[0]}: give its images folder {split[0]}"
        )


def _inputs_of(folder: Path, images: list[Path]) -> list[Path]:
    """A folder's images but MSRA10K's masks (a .png beside an image of its stem), with a note."""
    stems_with_other = {f.stem for f in images if f.suffix.lower() != ".png"}
    masks = [f for f in images if f.suffix.lower() == ".png" and f.stem in stems_with_other]
    if masks:
        note(
            f"--input {folder}: {len(masks)} .png file(s) beside an image of the same name taken for masks "
            f"(MSRA10K's name.jpg + name.png), not predicted: {listing((f.name for f in masks), 3)}"
        )
    taken = set(masks)
    return [f for f in images if f not in taken]


def _no_images(folder: Path) -> str:
    try:
        split = split_dirs(folder)
    except DataError:
        split = None
    if split is not None:
        return f"--input {folder} is a data set folder (images and masks): give its images folder {split[0]}"
    return f"--input folder {folder} holds no images ({', '.join(IMAGE_EXTS)})"


def plan_outputs(inputs: list[Path], out_dir: str | Path, suffix: str = ".png") -> list[tuple[Path, Path]]:
    """(input, output file) pairs inside ``out_dir``; two inputs that would write one file are an error."""
    planned: dict[Path, Path] = {}
    pairs = []
    for src in inputs:
        dst = output_path(out_dir, src.stem, suffix)
        if dst in planned:
            if planned[dst].resolve() == src.resolve():
                continue  # the same file given twice (as a file and through its folder)
            raise OptionError(
                f"--input {planned[dst]} and {src} would both be written to {dst}; "
                "rename one or predict them into separate --output folders"
            )
        planned[dst] = src
        pairs.append((src, dst))
    return pairs
