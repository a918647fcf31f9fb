"""``predict``: an 8-bit PNG saliency map (or, with ``--cutout``, an RGBA cutout: ``cutouts``), at
the input's own size and with its stem, per image, from a checkpoint (PyTorch) or from a file
written by ``export`` (onnxruntime or TorchScript)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from ..data import IMAGE_EXTS, init_loader_worker, load_image, split_dirs, worker_context
from ..distributed.process_setup import worker_threads
from ..errors import DataError, OptionError
from ..export.runtime import is_onnx, load_exported, require_onnxruntime
from ..inference import predict_maps, saliency_at_input_size, to_8bit_maps
from ..model.trained_model import build_model, read_trained_weights
from ..options import PredictOptions
from ..output_paths import check_writable_folder
from .crf import crf_refine, require_crf
from .cutouts import hard_map, save_cutout
from .maps import output_path, save_map

# a uint8 batch (N, 3, H, W) on the device to 8-bit maps (N, H, W)
MapFunction = Callable[[torch.Tensor], torch.Tensor]


def predict(options: PredictOptions) -> int:
    """Write one map (or cutout) per input image (files, or the images directly inside folders) into
    ``options.output``; returns the number written.

    Args:
        options: the command's options. The maps come from ``options.checkpoint`` (PyTorch) or
            from ``options.model``, a file written by ``export`` (``.onnx``: onnxruntime;
            otherwise TorchScript); exactly one of the two is given.

    Raises:
        OptionError: a wrong option, a missing input, two inputs that would write one map, an
            output that is not a folder, or a missing extra (``--crf``, onnxruntime).
        CheckpointError: the checkpoint or exported model cannot be read.
        DataError: an input image cannot be decoded.
    """
    options.validate()
    if options.model is not None and is_onnx(options.model):
        require_onnxruntime()
    if options.inference.crf:
        require_crf()
    out = Path(options.output)
    pairs = plan_outputs(collect_inputs(options.inputs), out)
    check_writable_folder(out, "--output")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with worker_threads(device) as threads:
        to_maps = _map_function(options, device, threads)
        out.mkdir(parents=True, exist_ok=True)
        for (_, dst), image in zip(pairs, _decoded(pairs, options.inference.workers)):
            saliency = to_maps(image[None].to(device))[0]
            if options.inference.crf:
                saliency = crf_refine(image, saliency)
            if options.threshold is not None:
                saliency = hard_map(saliency, options.threshold)
            if options.cutout:
                save_cutout(dst, image, saliency)
            else:
                save_map(dst, saliency)
    print(f"wrote {len(pairs)} {'cutout' if options.cutout else 'map'}(s) to {out}")
    return len(pairs)


def _map_function(options: PredictOptions, device: torch.device, threads: int) -> MapFunction:
    """The exported model's or the checkpoint's maps of a uint8 batch, at the inference size."""
    size, max_side = options.inference.size, options.inference.max_side
    if options.model is not None:
        run = load_exported(options.model, device, threads)
        return lambda images: to_8bit_maps(saliency_at_input_size(run, images, size, max_side))
    assert options.checkpoint is not None
    model = build_model(read_trained_weights(options.checkpoint, options.inference.backbone), device)
    return lambda images: predict_maps(model, images, options.inference.amp, size, max_side)


def _decoded(pairs: list[tuple[Path, Path]], workers: int) -> torch.utils.data.DataLoader:
    """The input images of ``pairs``, decoded in order by ``workers`` DataLoader workers."""
    return torch.utils.data.DataLoader(
        ImageFiles([src for src, _ in pairs]),
        batch_size=1,
        num_workers=workers,
        collate_fn=_only_image,
        worker_init_fn=init_loader_worker,
        multiprocessing_context=worker_context(workers),
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
            # An MSRA10K-style data set folder holds name.jpg beside its mask name.png: as in the
            # data loader's side-by-side layout, the .png of such a pair is the mask, not an input.
            stems_with_other = {f.stem for f in images if f.suffix.lower() != ".png"}
            found.extend(f for f in images if not (f.suffix.lower() == ".png" and f.stem in stems_with_other))
        elif p.is_file():
            found.append(p)
        else:
            raise OptionError(f"--input {p} does not exist")
    return found


def _no_images(folder: Path) -> str:
    """Why ``--input folder`` gives nothing, with the folder to give instead when it is a data set."""
    try:
        split = split_dirs(folder)
    except DataError:
        split = None
    if split is not None:
        return f"--input {folder} is a data set folder (images and masks): give its images folder {split[0]}"
    return f"--input folder {folder} holds no images ({', '.join(IMAGE_EXTS)})"


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
            raise OptionError(
                f"--input {planned[dst]} and {src} would both be written to {dst}; "
                "rename one or predict them into separate --output folders"
            )
        planned[dst] = src
        pairs.append((src, dst))
    return pairs


class ImageFiles(torch.utils.data.Dataset):
    """Decoded uint8 ``(3, H, W)`` images of a list of files (DataLoader workers decode)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        return load_image(self.paths[index])


def _only_image(batch: list[torch.Tensor]) -> torch.Tensor:
    return batch[0]
