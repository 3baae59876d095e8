"""Options for the whole suite. ``tests/`` itself is on the import path through the
``pythonpath`` setting in ``pyproject.toml``, so tests import ``helpers.*`` and ``core.*``."""

import os

# the gRPC tests import grpc into this process, and many tests start subprocesses after them:
# with grpc's fork support on (grpcio 1.81 and later), a child can die before its exec on
# "epoll_wait error: Bad file descriptor" (grpc/grpc issue 43055). Set before any grpc import.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


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
