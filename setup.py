"""Metadata lives in setup.cfg. This file adds the optional C kernels (``ignite_r3net._native``):
``optional=True`` lets the install succeed without a C compiler, and the package then uses its
torch / numpy paths (``ignite_r3net.native.available()`` tells which)."""

import os

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ignite_r3net._native",
            ["ignite_r3net/_native.c"],
            extra_compile_args=[] if os.name == "nt" else ["-O3", "-fno-math-errno"],
            optional=True,
        )
    ]
)
