"""Store-recovery transcripts: write a file store, damage its files, reopen, print what survived.

A transcript file (``tests/store/testdata/*.txt``) has the format of the core's transcripts
(``helpers/transcripts.py``: a command, ``----``, its output, a blank line; ``#`` lines are
comments). Each file shows one rule of ``dledger.store.recovery`` (its docstring and
docs/format.md, "Recovery"), named in its first comment line. ``test_recovery_transcripts.py``
replays every file and compares; ``pytest --update-goldens`` rewrites them (read the diff).

One store directory per transcript, always opened through a ``dledger.sim.disk.PowerLoss``
disk, so that a power loss can drop what was never synced and the machine's boot is known
(``sim-boot-<n>``, a new one after each power loss; a process crash keeps the boot and the page
cache). Bodies are ``<index>`` followed by letters (no zero byte), so a lost or torn byte shows.
Paths print relative to the store directory (``data/<20 digits>``; the directory itself as
``<dir>``).

Commands::

    open [durability=page_cache|fsync] [data=N] [index=N] [read-only]
                              open the store (data/index segment sizes, default 1024 and 2048
                              bytes: 15 records of 64 bytes per data segment). A new directory
                              is then made an established member's: its FRESH state cleared
                              and term 1 persisted. Prints what the open reported (below)
    reopen [options]          open again with the last options, changed by those given
    append N [batch] [term=T] [size=S]  N appends of one entry each (``batch``: one append
                              of N entries; ``term``: the term is raised to T first;
                              ``size``: body bytes, default 16); prints index@pos
    flush                     msync data and index, then write the checkpoint
    commit I                  the commit index (persisted by the next checkpoint)
    truncate I / reset I      drop entries I.. / the prefix up to I (reset: I is the new
                              before-begin index, with its entry's term)
    close                     a clean close (flush, checkpoint, clean-shutdown marker)
    crash                     the process dies: nothing flushed, the page cache keeps every
                              write (the same boot goes on)
    arm ops=K                 the process dies at the K-th mapping write or msync of the next
                              command (then the store is crashed, as by ``crash``)
    reboot                    the machine restarts cleanly (the store crashes if open): the
                              kernel wrote the page cache back, every write is on the disk
    power-loss [seed=S]       the machine loses power (the store crashes if open): only what
                              an msync made durable survives; with a seed, each unsynced
                              512-byte sector independently did or did not reach the disk
    tear I [bytes=B]          entry I's record keeps its first B bytes (default half of it),
                              and the data segment reads zeros from there on: the write cut
    zero FILE OFFSET N        N bytes at OFFSET read zeros (a lost sector)
    flip FILE OFFSET [bit=B]  invert one bit of a byte (bit 0 by default)
    write FILE OFFSET HEX...  write bytes given in hex (spaces between groups allowed): what
                              another writer, such as Java DLedger, left
    truncate-file FILE SIZE   cut a file to SIZE bytes
    remove-file FILE          delete a file
    log                       the log as the open store serves it (below)
    files                     every file of the directory: size and CRC-32 of its bytes
    cat FILE                  a small text file (checkpoint, currterm, suspect, boot)

``FILE`` is ``data/K`` or ``index/K`` (the K-th segment, or its 20-digit name), ``checkpoint``,
``currterm``..., or ``record:I`` / ``unit:I``: entry I's data record / index unit, located by
its index unit on disk. Within a record or unit ``OFFSET`` may be a field name (``magic``,
``size``, ``index``, ``term``, ``pos``, ``body_crc``, ``body_size``, ``body``...): the field's
last (least significant) byte, or the body's first.

What an open prints: ``opened``, or ``refused:`` and the error, then every warning the store
logged (``warning: ...``), then the log's bounds (``begin`` is the first index, ``end`` the last),
the commit index, the suspect state and the entries kept as damaged. ``log`` prints the bounds
again, then one line per entry: ``index term=T pos=P size=S body``, or ``DAMAGED`` and the
error when the store refuses to read it.
"""

from __future__ import annotations

import logging
import os
import random
import re
import tempfile
import zlib
from pathlib import Path

from dledger.entry import BODY_OFFSET, INDEX_UNIT_SIZE, DLedgerEntry, decode_index
from dledger.errors import DLedgerError
from dledger.sim.disk import PowerLoss, SimulatedCrash, crash_store
from dledger.store import DLedgerMmapFileStore
from helpers.transcripts import Command, TranscriptError, parse, render

DATA_FILE_SIZE = 1024
INDEX_FILE_SIZE = 2048
BODY_SIZE = 16
LETTERS = b"abcdefghijklmnopqrstuvwxyz"

#: field -> (offset, size) in a data record and in an index unit
RECORD_FIELDS = {"magic": (0, 4), "size": (4, 4), "index": (8, 8), "term": (16, 8), "pos": (24, 8),
                 "channel": (32, 4), "chain_crc": (36, 4), "body_crc": (40, 4), "body_size": (44, 4),
                 "body": (BODY_OFFSET, 1)}
UNIT_FIELDS = {"magic": (0, 4), "pos": (4, 8), "size": (12, 4), "index": (16, 8), "term": (24, 8)}
SMALL_FILES = ("checkpoint", "currterm", "suspect", "clean_shutdown", "boot")


def body_of(index: int, size: int) -> bytes:
    head = f"<{index}>".encode()
    return (head + LETTERS * (size // len(LETTERS) + 1))[:size]


def run_text(text: str, name: str = "<transcript>") -> str:
    """Run every command of a transcript in a new directory; return it with the actual output."""
    items = parse(text, name)
    outputs = {}
    with tempfile.TemporaryDirectory(prefix="recovery-transcript-") as tmp:
        driver = Driver(os.path.join(tmp, "store"))
        try:
            for item in items:
                if isinstance(item, Command):
                    try:
                        outputs[id(item)] = driver.execute(item.line)
                    except TranscriptError as exc:
                        raise TranscriptError(f"{name}:{item.lineno}: {item.line}: {exc}") from None
        finally:
            driver.shutdown()
    return render(items, outputs)


def run_file(path: Path) -> str:
    return run_text(path.read_text(), path.name)


class _Warnings(logging.Handler):
    """Collects what the store logs at WARNING and above while a command runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class _KeepEverything(random.Random):
    """A write-back that kept every unsynced sector (``PowerLoss.power_loss`` keeps a sector
    when ``random() < 0.5``): a clean reboot."""

    def random(self) -> float:
        return 0.0


class Driver:
    def __init__(self, store_dir: str) -> None:
        self.dir = store_dir
        self.disk = PowerLoss()
        self.store: DLedgerMmapFileStore | None = None
        self.opts = {"durability": "page_cache", "data_file_size": DATA_FILE_SIZE,
                     "index_file_size": INDEX_FILE_SIZE, "read_only": False}
        self.opened_once = False

    # -- plumbing -----------------------------------------------------------------------------
    def execute(self, line: str) -> list[str]:
        words = line.split()
        handler = getattr(self, "cmd_" + words[0].replace("-", "_"), None)
        if handler is None:
            raise TranscriptError(f"unknown command {words[0]!r}")
        if words[0] != "open" and not self.opened_once:
            raise TranscriptError("start with an 'open' command")
        plain, opts = [], {}
        for w in words[1:]:
            if "=" in w:
                k, v = w.split("=", 1)
                opts[k] = v
            else:
                plain.append(w)
        out = handler(plain, opts)
        return out or []

    def shutdown(self) -> None:
        if self.store is not None:
            crash_store(self.store)
            self.store = None
        self.disk.kill()

    def rel(self, text: str) -> str:
        """``text`` with the store directory's paths made relative to it."""
        return text.replace(self.dir + os.sep, "").replace(self.dir, "<dir>")

    def open_store(self) -> DLedgerMmapFileStore:
        if self.store is None:
            raise TranscriptError("the store is not open")
        return self.store

    def closed_store(self) -> None:
        if self.store is not None:
            raise TranscriptError("the store is open: close, crash or power-loss first")

    @staticmethod
    def integer(text: str, what: str) -> int:
        if not re.fullmatch(r"-?\d+", text):
            raise TranscriptError(f"{what} must be an integer, got {text!r}")
        return int(text)

    def no_options(self, opts: dict, allowed=()) -> None:
        extra = sorted(set(opts) - set(allowed))
        if extra:
            raise TranscriptError(f"unknown options {extra}")

    def dying(self, what, *args) -> list[str]:
        """Run a store call that an armed disk may interrupt; returns what happened."""
        try:
            what(*args)
        except SimulatedCrash:
            self.disk.disarm()
            crash_store(self.store)
            self.store = None
            return ["the process died here (armed)"]
        return []

    # -- opening ------------------------------------------------------------------------------
    def cmd_open(self, plain, opts):
        if self.opened_once:
            raise TranscriptError("the store was opened already: use reopen")
        return self._open(plain, opts)

    def cmd_reopen(self, plain, opts):
        if not self.opened_once:
            raise TranscriptError("nothing to reopen: start with open")
        self.closed_store()
        return self._open(plain, opts)

    def _open(self, plain, opts):
        self.no_options(opts, ("durability", "data", "index"))
        if set(plain) - {"read-only"}:
            raise TranscriptError(f"unknown words {sorted(set(plain) - {'read-only'})}")
        o = dict(self.opts, read_only="read-only" in plain)
        if "durability" in opts:
            o["durability"] = opts["durability"]
        if "data" in opts:
            o["data_file_size"] = self.integer(opts["data"], "data")
        if "index" in opts:
            o["index_file_size"] = self.integer(opts["index"], "index")
        new = not os.path.exists(self.dir)
        self.opts = o
        handler = _Warnings()
        logger = logging.getLogger("dledger.store")
        # the store's warnings whatever an earlier test left the root level at (a CLI run in
        # the same process sets it): they are part of the transcript
        level, logger.level = logger.level, logging.WARNING
        logger.addHandler(handler)
        try:
            store = DLedgerMmapFileStore.open(self.dir, store_io=self.disk.io, **o)
        except DLedgerError as exc:
            self.opened_once = True
            return [f"refused: {type(exc).__name__}: {self.rel(str(exc))}",
                    *(f"warning: {self.rel(m)}" for m in handler.messages)]
        except ValueError as exc:
            raise TranscriptError(str(exc)) from None
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
        self.store, self.opened_once = store, True
        out = ["opened" + (" read-only" if o["read_only"] else "")]
        if new and not o["read_only"]:
            store.clear_suspect()
            store.persist_term(1, None)
            out = [f"opened a new store ({o['durability']}, data segments of {o['data_file_size']} "
                   f"bytes, index segments of {o['index_file_size']}): FRESH cleared, term 1"]
        out += [f"warning: {self.rel(m)}" for m in handler.messages]
        return out + self.summary()

    def summary(self) -> list[str]:
        s = self.open_store()
        suspect = s.suspect.value if s.suspect is not None else "-"
        lines = [f"begin={s.ledger_before_begin_index + 1} end={s.ledger_end_index} "
                 f"before_begin_term={s.ledger_before_begin_term} "
                 f"end_term={s.ledger_end_term} committed={s.committed_index} term={s.current_term} "
                 f"suspect={suspect}"]
        for k, err in sorted(s.damaged().items()):
            lines.append(f"damaged {k}: {self.rel(str(err))}")
        return lines

    # -- the store's own operations -----------------------------------------------------------
    def cmd_append(self, plain, opts):
        self.no_options(opts, ("term", "size"))
        if len(plain) not in (1, 2) or plain[1:] not in ([], ["batch"]):
            raise TranscriptError("append N [batch] [term=T] [size=S]")
        s = self.open_store()
        n = self.integer(plain[0], "N")
        size = self.integer(opts.get("size", str(BODY_SIZE)), "size")
        if "term" in opts:
            term = self.integer(opts["term"], "term")
            if term > s.current_term:
                s.persist_term(term, None)
        done: list[str] = []

        def appends():
            if plain[1:] == ["batch"]:
                k = s.ledger_end_index + 1
                r = s.batch_append_as_leader([body_of(k + j, size) for j in range(n)])
                done.extend(f"{r.first_index + j}@{p}" for j, p in enumerate(r.positions))
                return
            for _ in range(n):
                k = s.ledger_end_index + 1
                e = s.append_as_leader(DLedgerEntry(body=body_of(k, size)))
                done.append(f"{e.index}@{e.pos}")

        try:
            died = self.dying(appends)
        except DLedgerError as exc:
            return [f"refused: {type(exc).__name__}: {self.rel(str(exc))}"]
        return [f"appended term={s.current_term}: " + " ".join(done) if done else "appended nothing",
                *died]

    def cmd_flush(self, plain, opts):
        self.no_options(opts)
        return self.dying(self.open_store().flush)

    def cmd_commit(self, plain, opts):
        self.no_options(opts)
        self.open_store().update_committed_index(self.integer(plain[0], "I"))

    def cmd_truncate(self, plain, opts):
        self.no_options(opts)
        s = self.open_store()
        return self.dying(s.truncate, self.integer(plain[0], "I"))

    def cmd_reset(self, plain, opts):
        self.no_options(opts)
        s = self.open_store()
        i = self.integer(plain[0], "I")
        return self.dying(s.reset, i, s.get_entry_term(i))

    def cmd_close(self, plain, opts):
        self.no_options(opts)
        self.open_store().close()
        self.store = None

    def cmd_crash(self, plain, opts):
        self.no_options(opts)
        crash_store(self.open_store())
        self.store = None

    def cmd_arm(self, plain, opts):
        self.no_options(opts, ("ops",))
        self.open_store()
        self.disk.arm(self.integer(opts.get("ops", ""), "ops"))

    def cmd_reboot(self, plain, opts):
        self.no_options(opts)
        self.disk.power_loss(self.store, _KeepEverything())
        self.store = None

    def cmd_power_loss(self, plain, opts):
        self.no_options(opts, ("seed",))
        rng = random.Random(self.integer(opts["seed"], "seed")) if "seed" in opts else None
        self.disk.power_loss(self.store, rng)
        self.store = None

    # -- damage -------------------------------------------------------------------------------
    def segment(self, kind: str, which: str) -> str:
        d = os.path.join(self.dir, kind)
        names = sorted(os.listdir(d)) if os.path.isdir(d) else []
        if re.fullmatch(r"\d{20}", which) and which in names:
            return os.path.join(d, which)
        if re.fullmatch(r"\d+", which) and int(which) < len(names):
            return os.path.join(d, names[int(which)])
        raise TranscriptError(f"no {kind} segment {which!r} (there are {len(names)})")

    def unit_on_disk(self, index: int):
        g = index * INDEX_UNIT_SIZE
        size = self.opts["index_file_size"]
        path = os.path.join(self.dir, "index", f"{g - g % size:020d}")
        if not os.path.exists(path):
            raise TranscriptError(f"index unit {index} is not on disk")
        with open(path, "rb") as fh:
            fh.seek(g % size)
            return path, g % size, decode_index(fh.read(INDEX_UNIT_SIZE))

    def locate(self, target: str, offset: str | None) -> tuple[str, int]:
        """(path, file offset) of ``target`` + ``offset`` (see the module docstring)."""
        m = re.fullmatch(r"(record|unit):(\d+)", target)
        if m:
            kind, index = m.group(1), int(m.group(2))
            path, uoff, unit = self.unit_on_disk(index)
            fields = UNIT_FIELDS if kind == "unit" else RECORD_FIELDS
            if offset in fields:
                at, size = fields[offset]
                rel = at + size - 1 if offset != "body" else at
            else:
                rel = self.integer(offset or "0", "OFFSET")
            if kind == "unit":
                return path, uoff + rel
            if unit.index != index:
                raise TranscriptError(f"index unit {index} on disk names entry {unit.index}")
            dsize = self.opts["data_file_size"]
            start = unit.pos - unit.pos % dsize
            return os.path.join(self.dir, "data", f"{start:020d}"), unit.pos - start + rel
        m = re.fullmatch(r"(data|index)/(\d+)", target)
        if m:
            path = self.segment(m.group(1), m.group(2))
        elif target in SMALL_FILES:
            path = os.path.join(self.dir, target)
        else:
            raise TranscriptError(f"unknown file {target!r}")
        return path, self.integer(offset or "0", "OFFSET")

    def existing(self, path: str) -> str:
        if not os.path.isfile(path):
            raise TranscriptError(f"no file {self.rel(path)}")
        return path

    def cmd_tear(self, plain, opts):
        self.no_options(opts, ("bytes",))
        self.closed_store()
        if len(plain) != 1:
            raise TranscriptError("tear I [bytes=B]")
        index = self.integer(plain[0], "I")
        _path, _off, unit = self.unit_on_disk(index)
        keep = self.integer(opts["bytes"], "bytes") if "bytes" in opts else unit.size // 2
        if not 0 <= keep < unit.size:
            raise TranscriptError(f"bytes must be within the record's {unit.size} bytes")
        path, off = self.locate(f"record:{index}", str(keep))
        n = os.path.getsize(path) - off
        with open(path, "r+b") as fh:
            fh.seek(off)
            fh.write(bytes(n))
        return [f"{self.rel(path)}: {n} bytes zeroed from offset {off} (entry {index} keeps {keep} "
                f"of its {unit.size} bytes)"]

    def cmd_zero(self, plain, opts):
        self.no_options(opts)
        self.closed_store()
        if len(plain) != 3:
            raise TranscriptError("zero FILE OFFSET N")
        path, off = self.locate(plain[0], plain[1])
        n = self.integer(plain[2], "N")
        with open(self.existing(path), "r+b") as fh:
            fh.seek(off)
            fh.write(bytes(n))
        return [f"{self.rel(path)}: {n} bytes zeroed from offset {off}"]

    def cmd_flip(self, plain, opts):
        self.no_options(opts, ("bit",))
        self.closed_store()
        if len(plain) != 2:
            raise TranscriptError("flip FILE OFFSET [bit=B]")
        path, off = self.locate(plain[0], plain[1])
        bit = self.integer(opts.get("bit", "0"), "bit")
        with open(self.existing(path), "r+b") as fh:
            fh.seek(off)
            old = fh.read(1)
            if len(old) != 1:
                raise TranscriptError(f"offset {off} is beyond {self.rel(path)}")
            fh.seek(off)
            fh.write(bytes([old[0] ^ (1 << bit)]))
        return [f"{self.rel(path)} offset {off}: {old[0]:#04x} -> {old[0] ^ (1 << bit):#04x}"]

    def cmd_write(self, plain, opts):
        self.no_options(opts)
        self.closed_store()
        if len(plain) < 3:
            raise TranscriptError("write FILE OFFSET HEX...")
        path, off = self.locate(plain[0], plain[1])
        try:
            data = bytes.fromhex("".join(plain[2:]))
        except ValueError:
            raise TranscriptError(f"not hex: {' '.join(plain[2:])!r}") from None
        if off + len(data) > os.path.getsize(self.existing(path)):
            raise TranscriptError(f"{len(data)} bytes at offset {off} go beyond {self.rel(path)}")
        with open(path, "r+b") as fh:
            fh.seek(off)
            fh.write(data)
        return [f"{self.rel(path)}: {len(data)} bytes written at offset {off}"]

    def cmd_truncate_file(self, plain, opts):
        self.no_options(opts)
        self.closed_store()
        if len(plain) != 2:
            raise TranscriptError("truncate-file FILE SIZE")
        path, _ = self.locate(plain[0], None)
        os.truncate(self.existing(path), self.integer(plain[1], "SIZE"))

    def cmd_remove_file(self, plain, opts):
        self.no_options(opts)
        self.closed_store()
        if len(plain) != 1:
            raise TranscriptError("remove-file FILE")
        path, _ = self.locate(plain[0], None)
        os.unlink(self.existing(path))

    # -- looking ------------------------------------------------------------------------------
    def cmd_log(self, plain, opts):
        self.no_options(opts)
        s = self.open_store()
        lines = self.summary()[:1]
        for k in range(s.ledger_before_begin_index + 1, s.ledger_end_index + 1):
            try:
                e = s.get(k)
            except DLedgerError as exc:
                lines.append(f"{k} DAMAGED {self.rel(str(exc))}")
                continue
            text = bytes(e.body[:12]).decode("ascii", "replace")
            more = "..." if len(e.body) > 12 else ""
            lines.append(f"{e.index} term={e.term} pos={e.pos} size={e.size} {text}{more}")
        return lines

    def cmd_files(self, plain, opts):
        self.no_options(opts)
        lines = []
        for sub in ("data", "index"):
            d = os.path.join(self.dir, sub)
            for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                lines.append(self.describe(os.path.join(d, name)))
        for name in SMALL_FILES:
            path = os.path.join(self.dir, name)
            if os.path.exists(path):
                lines.append(self.describe(path))
        return lines

    def describe(self, path: str) -> str:
        with open(path, "rb") as fh:
            data = fh.read()
        return f"{self.rel(path)} {len(data)} bytes crc={zlib.crc32(data):08x}"

    def cmd_cat(self, plain, opts):
        self.no_options(opts)
        if len(plain) != 1 or plain[0] not in SMALL_FILES:
            raise TranscriptError(f"cat one of {' '.join(SMALL_FILES)}")
        path = os.path.join(self.dir, plain[0])
        if not os.path.exists(path):
            return ["(no such file)"]
        with open(path, "rb") as fh:
            return fh.read().decode("ascii", "replace").splitlines()

