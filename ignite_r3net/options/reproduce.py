"""``reproduce``'s own options (its training options are ``TrainConfig``'s) and the paper's defaults."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionError
from .fields import NOT_NEGATIVE, check_fields, option

# the training options ``reproduce`` sets unless given: the original recipe on MSRA10K, continued
REPRODUCE_DEFAULTS = {"recipe": "r3net-paper", "data": ["MSRA10K"], "output_dir": "runs/r3net-paper", "resume": "auto"}


@dataclass(kw_only=True)
class ReproduceOptions:
    """What ``reproduce`` does besides training: the model to evaluate, extra columns, tolerances."""

    checkpoint: str | None = option(
        None,
        "evaluate this model instead of training one: a checkpoint file or hf-hub:ORG/NAME[@REVISION]; default: "
        "none (train, then evaluate the final checkpoint)",
        metavar="CKPT",
    )
    author_maps: str | None = option(
        None,
        "the authors' released saliency maps: a folder with one subfolder per test set (named as the set "
        "or an alias, e.g. ECSSD/, hkuis/), scored by the same code as ours, in a column of its own (tells "
        "evaluation differences from training differences); default: none (no such column)",
        metavar="DIR",
    )
    seeds: list[int] | None = option(
        None,
        "train one model per seed (each in OUTPUT_DIR/seed-N) and report the mean and the spread (sample "
        "standard deviation, min and max); default: one model, --seed",
        nargs="+",
        metavar="SEED",
    )
    tolerance_maxf: float = option(
        0.01,
        "a max F within this of the reference counts as reproduced (an absolute difference of max F, a score "
        "from 0 to 1)",
        rule=NOT_NEGATIVE,
        metavar="T",
    )
    tolerance_mae: float = option(
        0.005,
        "an MAE within this of the reference counts as reproduced (an absolute difference of MAE, from 0 to 1)",
        rule=NOT_NEGATIVE,
        metavar="T",
    )

    def validate(self) -> None:
        check_fields(self)
        if self.checkpoint is not None and self.seeds is not None:
            raise OptionError("--seeds trains one model per seed; --checkpoint skips training: give one")
        if self.seeds is not None and len(set(self.seeds)) != len(self.seeds):
            raise OptionError(f"--seeds: a seed is given twice: {' '.join(map(str, self.seeds))}")
