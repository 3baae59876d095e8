"""The one build step pyproject.toml cannot declare without an experimental table: the broker's
compiled hot loops (``dledger.broker._speedups``, C sources in src/dledger/broker/csrc). The
extension is optional: where it does not compile (no C compiler), pip warns and installs the
package without it, and dledger runs on the pure-Python references (dledger/broker/speedups.py;
docs/broker.md, "The compiled hot loops")."""

from glob import glob

from setuptools import Extension, setup

setup(ext_modules=[Extension("dledger.broker._speedups", sorted(glob("src/dledger/broker/csrc/*.c")),
                             depends=["src/dledger/broker/csrc/speedups.h"], optional=True)])
