"""Options for the whole suite. ``tests/`` itself is on the import path through the
``pythonpath`` setting in ``pyproject.toml``, so tests import ``helpers.*`` and ``core.*``."""


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite the transcript files (tests/core/testdata/*.txt, tests/store/testdata/*.txt) "
                          "with the actual output")


def pytest_report_header(config):
    try:
        from sim.test_fresh_seeds import FIRST_DRAWN
    except Exception:           # the file is not collected in this run
        return None
    return (f"fresh swarm seeds this run: from {FIRST_DRAWN} (replay with DLEDGER_FRESH_SEED={FIRST_DRAWN})")
