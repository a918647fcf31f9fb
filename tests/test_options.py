"""One options object per command: the command line fills it, each rule has one wording whichever
command (or Python caller) breaks it, and a bad value stops the command before it touches a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from ignite_r3net import cli
from ignite_r3net.cli import options_from_args
from ignite_r3net.errors import OptionError
from ignite_r3net.evaluation.evaluate import evaluate
from ignite_r3net.export.writer import export_model
from ignite_r3net.options import (
    CompareOptions,
    EvaluateOptions,
    ExportOptions,
    InferenceOptions,
    PredictOptions,
    ProcessOptions,
)


def _commands(tmp: Path) -> dict[str, list[str]]:
    """Each command with its required options; the paths need not exist (options are checked first)."""
    out = str(tmp / "out")
    return {
        "train": ["train", "--output-dir", out],
        "evaluate": ["evaluate", "--checkpoint", "c.pt", "--data", "d", "--save-maps", out],
        "compare": ["compare", "--datasets", "A=a", "--methods", "M=m", "--out", out],
        "predict": ["predict", "--checkpoint", "c.pt", "--input", "i", "--output", out],
    }


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--workers", "-1", "--workers must not be negative, got -1"),
        ("--nproc", "0", "--nproc must be a positive integer, got 0"),
        ("--master-port", "70000", "--master-port must be a TCP port (1-65535), got 70000"),
    ],
)
def test_shared_options_have_one_wording_in_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture, flag: str, value: str, message: str
) -> None:
    for name, args in _commands(tmp_path).items():
        if flag != "--workers" and name == "predict":  # predict runs in one process
            continue
        assert cli.main([*args, flag, value]) == 2, name
        assert capsys.readouterr().err == f"error: {message}\n", name
        assert not (tmp_path / "out").exists(), name


def test_the_command_line_fills_each_field(tmp_path: Path) -> None:
    parser = cli.build_parser()
    args = parser.parse_args(
        ["evaluate", "--checkpoint", "c.pt", "--data", "d1", "d2", "--json", "r.json", "--crf", "--nproc", "3"]
    )
    assert options_from_args(EvaluateOptions, args) == EvaluateOptions(
        checkpoint="c.pt",
        data=["d1", "d2"],
        json_path="r.json",
        inference=InferenceOptions(crf=True),
        processes=ProcessOptions(nproc=3),
    )
    args = parser.parse_args(["predict", "--model", "m.onnx", "--input", "a.jpg", "b", "--output", "o"])
    assert options_from_args(PredictOptions, args) == PredictOptions(model="m.onnx", inputs=["a.jpg", "b"], output="o")
    args = parser.parse_args(["compare", "--datasets", "A=a", "--methods", "M=m", "--out", "o", "--digits", "4"])
    options = options_from_args(CompareOptions, args)
    assert options.digits == 4 and options.metrics == ["mae", "maxF", "Sm", "maxE", "wF"]
    assert options.processes == ProcessOptions() and options.inference == InferenceOptions()


def test_python_callers_get_the_command_line_checks(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"^--workers must not be negative, got -2$"):
        evaluate(EvaluateOptions(checkpoint="c.pt", data=["d"], inference=InferenceOptions(workers=-2)))
    with pytest.raises(OptionError, match=r"^give one of --checkpoint and --maps$"):
        evaluate(EvaluateOptions(data=["d"]))
    with pytest.raises(OptionError, match=r"^--format must be one of onnx, torchscript, hub, got 'tflite'$"):
        export_model(ExportOptions(checkpoint="c.pt", format="tflite", output=str(tmp_path / "m.tflite")))
    with pytest.raises(OptionError, match=r"^--opset applies to --format onnx only$"):
        export_model(ExportOptions(checkpoint="c.pt", format="torchscript", output="m.pt", opset=18))
    with pytest.raises(OptionError, match=r"^--amp goes with --checkpoint"):
        PredictOptions(model="m.pt", inputs=["i"], output="o", inference=InferenceOptions(amp="bf16")).validate()
    with pytest.raises(OptionError, match=r"^--digits must be between 1 and 8, got 9$"):
        CompareOptions(datasets=["A=a"], methods=["M=m"], out="o", digits=9).validate()
