"""The standard data sets by name (``--data-root``): every set of a generated data root, each in
another layout and under an alias, is found by its name and any alias; a count other than the
published one warns with both numbers; an unknown name is one error line listing the known ones."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers import STANDARD_LAYOUTS, make_data_root

from ignite_r3net import cli
from ignite_r3net.config import TrainConfig
from ignite_r3net.data.folder import list_pairs
from ignite_r3net.data.registry import check_count, find_in_root, found_sets, resolve_names, standard_set
from ignite_r3net.errors import OptionError
from ignite_r3net.training.recipe_config import batch_layout
from ignite_r3net.training.start import resolve_data


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_data_root(tmp_path_factory.mktemp("root"), n=3)


@pytest.mark.parametrize("name", list(STANDARD_LAYOUTS))
def test_every_set_is_found_by_name_whatever_its_folder_and_layout(data_root, name, capsys):
    (folder,) = resolve_names([name], str(data_root), "--data")
    pairs = list_pairs(folder)
    assert len(pairs) == 3
    assert {image.suffix for image, _ in pairs} == {STANDARD_LAYOUTS[name][3]}
    warning = capsys.readouterr().err
    published = standard_set(name).pairs
    assert f"{name} in {folder}: 3 pairs, the published set has {published}" in warning


@pytest.mark.parametrize(
    "alias, name",
    [
        ("hkuis", "HKU-IS"),
        ("HKU_IS", "HKU-IS"),
        ("pascals", "PASCAL-S"),
        ("DUT-O", "DUT-OMRON"),
        ("duts-te", "DUTS-TE"),
    ],
)
def test_aliases_name_the_set(data_root, alias, name):
    (named,) = resolve_names([alias], str(data_root), "--datasets", named=True)
    assert named.startswith(f"{name}=")


def test_the_published_count_gives_no_warning(tmp_path, capsys):
    root = make_data_root(tmp_path, n=3, sets=("SOD",))
    complete = dataclasses.replace(standard_set("SOD"), pairs=3)  # a registry whose SOD has 3 pairs
    assert check_count(find_in_root(root, complete), complete) == 3
    assert capsys.readouterr().err == ""


def test_a_wrong_count_names_the_unpaired_files(tmp_path, capsys):
    root = make_data_root(tmp_path, n=3, sets=("ECSSD",))
    next((root / "ecssd").glob("*.png")).unlink()
    resolve_names(["ECSSD"], str(root), "--data")
    warning = capsys.readouterr().err
    assert "2 pairs, the published set has 1000" in warning and "image without mask" in warning


def test_an_unknown_name_is_one_line_listing_the_known_ones(data_root):
    with pytest.raises(OptionError) as refused:
        resolve_names(["ECSD"], str(data_root), "--data")
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert message.startswith("--data ECSD: no such folder and no data set of that name (known: ECSSD, HKU-IS")


def test_a_known_set_missing_from_the_root_is_named(tmp_path):
    root = make_data_root(tmp_path, n=3, sets=("ECSSD",))
    with pytest.raises(OptionError, match=r"--data DUTS-TR: no folder of DUTS-TR in --data-root"):
        resolve_names(["DUTS-TR"], str(root), "--data")


def test_paths_stay_paths_and_found_sets_lists_the_test_sets(data_root):
    folder = str(data_root / "ecssd")
    assert resolve_names([folder, f"X={folder}"], str(data_root), "--data") == [folder, f"X={folder}"]
    assert list(found_sets(data_root)) == ["ECSSD", "HKU-IS", "PASCAL-S", "SOD", "DUT-OMRON", "DUTS-TE"]
    assert list(found_sets(data_root, "train")) == ["MSRA10K"]


def test_train_takes_the_names_from_its_data_root(data_root):
    config = TrainConfig(data=["MSRA10K"], val_data="ecssd", data_root=str(data_root), crop=32, batch_size=2)
    resolved = resolve_data(config, batch_layout(config, 1))
    assert resolved.folders == [str(data_root / "MSRA10K_Imgs_GT" / "Imgs")] and resolved.data_sets[0]["pairs"] == 3
    assert resolved.val_data == str(data_root / "ecssd")


def test_evaluate_refuses_an_unknown_name_before_any_work(data_root, capsys):
    argv = ["evaluate", "--checkpoint", "missing.pt", "--data-root", str(data_root), "--data", "ECSSD", "ECSD"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --data ECSD: no such folder and no data set of that name (known: ECSSD,")
