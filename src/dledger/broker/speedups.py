"""The broker's compiled hot loops: whether this process has them, and which it uses.

``dledger.broker._speedups`` (C, sources in ``csrc/``) holds compiled twins of the broker's
per-message loops, each with its pure-Python reference, which defines the results:

- the dispatch scan (``dispatch_scan.new_scanner()``; reference ``dispatch_scan.MessageScanner``),
  and the same scan gathered per consume queue (``scan_queues``, used by
  ``ReputService._dispatch_gathered``; reference the reput service's walk message by message),
- the append hook's stamps, once per joined batch (``append_stamps.stamp_messages``; reference
  ``append_stamps.python_stamp_messages``), and its reading of one message
  (``append_stamps.locate``; reference ``message_codec.locate``),
- the key index's writes (``IndexFile.put_hashes``; reference ``IndexFile._put_hashes_python``),
- the loop of ``put_messages`` (``put_encode.PutEncoder.encode_batch``: each message's checks
  and layout; reference ``PutEncoder.encode``), and its answers (``put_results``; reference
  ``DLedgerCommitLog._results``' loop over ``put_result.put_ok``).

It is built at install where a C compiler is present (``setup.py``: an optional extension, so an
install without a compiler warns and goes on) and used when it imports and its ``ABI_VERSION``
is this module's. Anywhere else, or with ``DLEDGER_PURE_PYTHON=1`` in the environment, the
references run: same files, same answers, more CPU per message. ``IMPLEMENTATION`` says which
one this process uses. The tests hold each compiled loop to its reference on the same inputs.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

#: the compiled module's interface this package expects (``_speedups.c``'s ``ABI_VERSION``)
ABI_VERSION = 4


def load():
    """The compiled module when it is there, fits and is not turned off; else None (why, logged:
    at debug level for a missing module, normal where no compiler was at install)."""
    if os.environ.get("DLEDGER_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        import dledger.broker._speedups as _speedups
    except ImportError as exc:
        log.debug("the broker's compiled hot loops are not installed (%s): the Python references run", exc)
        return None
    if getattr(_speedups, "ABI_VERSION", None) != ABI_VERSION:
        log.warning("the broker's compiled hot loops (%s) have interface %s, this package expects %s: they were "
                    "built from another version of the source; the Python references run (reinstall to rebuild "
                    "them)", _speedups.__file__, getattr(_speedups, "ABI_VERSION", None), ABI_VERSION)
        return None
    return _speedups


compiled = load()
#: "C" or "Python": what this process runs the broker's hot loops with
IMPLEMENTATION = "C" if compiled is not None else "Python"
