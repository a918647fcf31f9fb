"""The package's metadata: the licence setup.cfg declares is the LICENSE file it ships."""

from __future__ import annotations

import configparser

from helpers import REPO


def test_the_declared_licence_is_the_shipped_license_file() -> None:
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg", encoding="utf-8")
    metadata = setup["metadata"]
    assert metadata["license"] == "MIT"
    assert metadata["license_files"].split() == ["LICENSE"]  # a wheel's dist-info/licenses/LICENSE
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n\nCopyright (c) 2026 ignite_r3net contributors\n")
    assert "Permission is hereby granted, free of charge" in text
