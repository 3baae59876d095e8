"""Regenerate the Python modules of this package from the .proto files under ``proto/``.

Run with an interpreter that has ``grpcio-tools`` (whose protobuf has the major version the
project installs; a throwaway virtualenv is enough)::

    python src/dledger/broker/grpc_v2/rocketmq_v2/regenerate.py

It runs ``grpc_tools.protoc`` on ``proto/apache/rocketmq/v2/*.proto`` into this directory and
rewrites the generated absolute imports (``from apache.rocketmq.v2 import ...``) to this
package's own path, so the modules load as ``dledger.broker.grpc_v2.rocketmq_v2.*_pb2``.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE = "dledger.broker.grpc_v2.rocketmq_v2"
NAMES = ("definition", "service")      # admin.proto: the Admin service is not served


def rewrite(text: str) -> str:
    """The generated module with its ``apache.rocketmq.v2`` imports pointing at this package."""
    return re.sub(r"^from apache\.rocketmq\.v2 import ", f"from {PACKAGE} import ", text, flags=re.M)


def main() -> int:
    from grpc_tools import protoc

    import grpc_tools

    include = str(pathlib.Path(grpc_tools.__file__).parent / "_proto")
    proto_root = HERE / "proto"
    with tempfile.TemporaryDirectory() as out:
        args = ["protoc", f"-I{proto_root}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}"]
        args += [str(proto_root / "apache" / "rocketmq" / "v2" / f"{n}.proto") for n in NAMES]
        if protoc.main(args) != 0:
            print("protoc failed", file=sys.stderr)
            return 1
        gen = pathlib.Path(out) / "apache" / "rocketmq" / "v2"
        for path in sorted(gen.glob("*.py")):
            (HERE / path.name).write_text(rewrite(path.read_text()))
            print(f"wrote {path.name}")
    shutil.rmtree(HERE / "__pycache__", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
