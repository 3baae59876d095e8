"""Options for the whole suite. ``tests/`` itself is on the import path through the
``pythonpath`` setting in ``pyproject.toml``, so tests import ``helpers.*`` and ``core.*``."""


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite tests/core/testdata/*.txt with the actual transcript output")
