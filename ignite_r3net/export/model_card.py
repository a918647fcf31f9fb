"""The model card (README.md) of a Hub folder: the Hub's metadata, how to use the model, the files, the training
recipe, the evaluation (``--results``) and the cost (``--profile``), and the citation."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import OptionError
from ..evaluation.comparison_table import Results, build_table, table_markdown
from ..metrics.keys import DEFAULT_METRICS
from ..model.backbone_weights import HF_PREFIX, is_hub_source
from ..model.backbones import model_name
from ..options.fields import load_json
from ..profiling.report import markdown_table, measured_with

DEFAULT_LICENSE = "mit"  # this package's; the user states the weights' own with --license
TAGS = ("saliency-detection", "salient-object-detection", "image-segmentation", "r3net", "pytorch-ignite")
PIPELINE_TAG = "image-segmentation"  # the Hub's task closest to a per-pixel saliency map
_METRIC_NAMES = {"mae": "MAE ↓", "maxF": "max F ↑", "Sm": "S ↑", "maxE": "max E ↑", "wF": "weighted F ↑"}
_RECIPE = tuple("data val_data val_split iters batch_size lr lr_power momentum weight_decay crop rotate".split())
_CITATION = """@inproceedings{deng2018r3net,
  title     = {R3Net: Recurrent Residual Refinement Network for Saliency Detection},
  author    = {Deng, Zijun and Hu, Xiaowei and Zhu, Lei and Xu, Xuemiao and Qin, Jing and Han, Guoqiang
               and Heng, Pheng-Ann},
  booktitle = {Proceedings of the 27th International Joint Conference on Artificial Intelligence (IJCAI)},
  pages     = {684--690},
  year      = {2018}
}"""


def read_results(path: str | Path) -> tuple[str, Results]:
    """``(kind, {dataset: {method: row}})`` from the results.json of ``evaluate --json`` or ``compare``."""
    what = f"--results {path}"
    data = load_json(path, what)
    if not isinstance(data, dict) or not data or not all(isinstance(v, dict) for v in data.values()):
        raise OptionError(f"{what}: expected the results.json of 'evaluate --json' or 'compare'")
    kind, results = "compare", data
    if all(_is_number(row.get("mae")) for row in data.values()):  # evaluate: one row per data set
        kind = "evaluate"
        results = {d: {"this model": {**row, "count": row.get("images", 0)}} for d, row in data.items()}
    for dataset, methods in results.items():
        for method, row in methods.items():
            lacking = [m for m in DEFAULT_METRICS if not isinstance(row, Mapping) or not _is_number(row.get(m))]
            if lacking:
                raise OptionError(f"{what}: {method} on {dataset} has no {', '.join(lacking)}: not our results.json")
    return kind, results


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def model_card(
    config: Mapping[str, Any],
    results: tuple[str, Results] | None,
    options: Mapping[str, Any],
    cost: tuple[dict[str, Any], list[dict[str, Any]]] | None = None,
) -> str:
    """The README.md of a hub export with this ``config.json``; ``options``: license, trained_on, repo_id;
    ``cost``: the header and rows of ``profile --json``."""
    repo = options.get("repo_id") or "ORG/NAME"
    parts = [
        _metadata(config, options),
        f"# {model_name(config['backbone'], config.get('head_width', 1))} for salient object detection\n\n"
        "R3Net (Deng et al., *R3Net: Recurrent Residual Refinement Network for Saliency Detection*, IJCAI 2018) "
        "predicts a saliency map: for every pixel, the probability that it belongs to the most noticeable "
        f"object. Exported with `ignite_r3net` {config['ignite_r3net']['version']}.",
        _usage(repo),
        _files(config),
        _training(config),
    ]
    if results is not None:
        parts.append(_evaluation(*results))
    if cost is not None:
        parts.append(f"## Cost\n\n{measured_with(*cost)}\n\n{markdown_table(cost[1])}")
    parts.append(f"## Citation\n\n```bibtex\n{_CITATION}\n```")
    return "\n\n".join(parts) + "\n"


def _metadata(config: Mapping[str, Any], options: Mapping[str, Any]) -> str:
    """YAML front matter; every value a JSON string, which YAML reads as it is."""
    license_id = json.dumps(options.get("license") or DEFAULT_LICENSE)
    lines = ["---", "library_name: ignite_r3net", f"license: {license_id}", f"pipeline_tag: {PIPELINE_TAG}"]
    lines += ["tags:"] + [f"- {json.dumps(tag)}" for tag in (*TAGS, config["backbone"])]
    if options.get("trained_on"):
        lines += ["datasets:"] + [f"- {json.dumps(name)}" for name in options["trained_on"]]
    start = (config.get("starting_weights") or {}).get("source", "")
    if is_hub_source(start):  # the backbone's ImageNet weights on the Hub: the model this one grew from
        lines.append(f"base_model: {json.dumps(start[len(HF_PREFIX) :].partition('@')[0])}")
    return "\n".join([*lines, "---"])


def _usage(repo: str) -> str:
    return (
        "## Use\n\n"
        "With `ignite_r3net` installed (`pip install -e .` in its checkout):\n\n"
        "```bash\n"
        f"python run.py predict --checkpoint hf-hub:{repo} --input photos --output maps\n"
        f"python run.py predict --checkpoint hf-hub:{repo} --input photos --output cutouts --cutout\n"
        f"python run.py evaluate --checkpoint hf-hub:{repo} --data DUTS-TE\n"
        "```\n\n"
        "`hf-hub:ORG/NAME@REVISION` pins a revision (a branch, tag or commit). `python run.py export "
        f"--checkpoint hf-hub:{repo} --format onnx --output r3net.onnx` gives the model as one ONNX file "
        "for use without this package."
    )


def _files(config: Mapping[str, Any]) -> str:
    contract, checkpoint = config["contract"], config["checkpoint"]
    return (
        "## Files\n\n"
        "| | |\n|---|---|\n"
        f"| `model.safetensors` | the R3Net state_dict (ignite_r3net key layout), backbone `{config['backbone']}`, "
        f"head width {config.get('head_width', 1):g} |\n"
        "| `config.json` | backbone, head width, input contract, training recipe, starting weights, sha256 of the "
        "source |\n"
        f"| input | {contract['input']} |\n"
        f"| output | {contract['output']} |\n"
        f"| preprocessing | {contract['preprocessing'].removeprefix('inside the graph: ')} (`predict` does it; "
        "ONNX and TorchScript exports hold it in their graph) |\n"
        f"| exported from | `{checkpoint['source']}`, sha256 `{checkpoint['sha256']}` |"
    )


def _training(config: Mapping[str, Any]) -> str:
    recipe, start = config.get("training"), config.get("starting_weights")
    if not recipe:
        return "## Training\n\nThe checkpoint came without its run's config.json: the recipe is not recorded."
    used = {**recipe, **(recipe.get("resolved") or {})}  # the values the run used where start-up resolved them
    rows = [f"| `{key}` | `{json.dumps(used[key])}` |" for key in _RECIPE if key in used]
    if start:
        rows.append(f"| starting weights | `{start.get('source')}`, sha256 `{start.get('sha256')}` |")
    intro = "The run's options (all of them are in `config.json`, under `training`):"
    return "\n".join(["## Training", "", intro, "", "| option | value |", "|---|---|", *rows])


def _evaluation(kind: str, results: Results) -> str:
    datasets = list(results)
    if kind == "compare":
        methods = list(dict.fromkeys(m for d in datasets for m in results[d]))
        table = table_markdown(build_table(results, datasets, methods, list(DEFAULT_METRICS), 3))
        intro = "From `compare` (best value of each column bold, second-best underlined):"
    else:
        header = "| Data set | images | " + " | ".join(_METRIC_NAMES[m] for m in DEFAULT_METRICS) + " |"
        rows = [
            f"| {d} | {int(results[d]['this model']['count'])} | "
            + " | ".join(f"{results[d]['this model'][m]:.3f}" for m in DEFAULT_METRICS)
            + " |"
            for d in datasets
        ]
        table = "\n".join([header, "|---|--:" + "|--:" * len(DEFAULT_METRICS) + "|", *rows])
        intro = "From `evaluate` (each image at its full resolution):"
    return f"## Evaluation\n\n{intro}\n\n{table.rstrip()}"
