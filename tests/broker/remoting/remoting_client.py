"""A blocking remoting client for tests: one socket, one request at a time (answers matched by opaque)."""

from __future__ import annotations

import itertools
import json
import socket

from dledger.broker.remoting.command import CommandDecoder, RemotingCommand, decode_frame, encode


class RemotingClient:
    def __init__(self, address: str, timeout: float = 10.0) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.decoder = CommandDecoder()
        self.opaque = itertools.count(1)
        self.pending: list[RemotingCommand] = []

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> RemotingCommand | None:
        """The next answer, or None when the server closed the connection."""
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.pending.extend(decode_frame(f) for f in self.decoder.feed(data))
        return self.pending.pop(0)

    def call(self, code: int, ext: dict | None = None, body: bytes = b"", *, serialize_type: int = 0,
             flag: int = 0) -> RemotingCommand:
        cmd = RemotingCommand(code, next(self.opaque), flag, None, {k: str(v) for k, v in (ext or {}).items()},
                              body, language="PYTHON", serialize_type=serialize_type)
        self.send_raw(encode(cmd))
        answer = self.read()
        assert answer is not None, "the server closed the connection"
        assert answer.opaque == cmd.opaque and answer.is_response, answer
        return answer

    def json(self, code: int, ext: dict | None = None, body: bytes = b""):
        answer = self.call(code, ext, body)
        return answer, (json.loads(answer.body) if answer.body else None)
