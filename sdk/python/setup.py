"""Builds and installs hap_serve from the source tree; the build step generates the gRPC stubs
from ../../proto into the built package (generate_stubs.py), so they are never committed.

    /usr/bin/python3 setup.py build          # -> build/lib/hap_serve (with _proto)
    /usr/bin/python3 -m pip install --no-build-isolation --user --break-system-packages .
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate_stubs  # noqa: E402  (beside this file)


class BuildPyWithStubs(build_py):
    """build_py, then the stubs into <build_lib>/hap_serve/_proto."""

    def run(self):
        super().run()
        if self.dry_run:
            return
        out = os.path.join(self.build_lib, "hap_serve", "_proto")
        try:
            generate_stubs.generate(out=out)
        except RuntimeError as e:
            raise SystemExit(f"hap_serve: cannot generate the gRPC stubs: {e}")


setup(
    name="hap_serve",
    version="0.1.0",
    description="Python client of HAP serve (hap.v1.Generation: streaming vision-language "
                "generation with visual-token pruning)",
    python_requires=">=3.9",
    # hap_serve._proto is not listed: it is generated into the build, whatever the source
    # tree's copy holds.
    packages=["hap_serve"],
    install_requires=["grpcio>=1.51", "protobuf>=3.20"],
    cmdclass={"build_py": BuildPyWithStubs},
)
