"""Where each group of a ``dledger node`` process keeps its store.

A node's store is ``<store_dir>/dledger-<id>`` (Java DLedger's layout,
``DLedgerConfig.default_path``). The groups of one process often share ``store_dir`` (a
top-level key of the TOML file, or ``--store-dir``) and the node id, hence that path, and the
second group would find the store locked by the first. So, in a process that runs several
groups (``place``):

- a group whose path no other group of the process has keeps it: a single group, or groups
  whose ids or directories differ, find their stores where they always were;
- groups that share a path, and do not set ``store_dir`` in their own ``[[groups]]`` table,
  each get ``<store_dir>/<group>/dledger-<id>`` (the group's name must then be a plain
  directory name: letters, digits, ``_``, ``-`` and ``.``, not starting with ``.``); a group
  that sets ``store_dir`` in its own table keeps the path that gives;
- when a store already exists at a shared path and no group claims it in its own table (it
  was written while the process ran one of them alone), nothing guesses whose it is: refused,
  asking to give the group it belongs to ``store_dir`` in its ``[[groups]]`` table;
- two groups left with one path (both set the same ``store_dir`` in their tables) are
  refused, naming both.
Memory stores have no directory and are left alone. Every refusal is a ``ValueError`` whose
one line names the groups and the path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from dledger.config import FILE, DLedgerConfig

#: a group name that can name a directory by itself
_DIR_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")


def _path(c: DLedgerConfig) -> str:
    return os.path.normpath(os.path.abspath(c.default_path))


def _names(configs: Sequence[DLedgerConfig], ks) -> str:
    names = [repr(configs[k].group) for k in ks]
    return ", ".join(names[:-1]) + f" and {names[-1]}"


def place(configs: Sequence[DLedgerConfig], own_dir: Sequence[bool], where: str) -> list[DLedgerConfig]:
    """``configs`` with a directory of its own for each group that shares its default path
    with another group (see the module docstring); ``own_dir[k]``: group ``k`` sets
    ``store_dir`` in its own table."""
    out = list(configs)
    shared: dict[str, list[int]] = {}
    for k, c in enumerate(configs):
        if c.store_type == FILE:
            shared.setdefault(_path(c), []).append(k)
    for path, ks in shared.items():
        if len(ks) < 2:
            continue
        claimed = [k for k in ks if own_dir[k]]
        if len(claimed) > 1:
            raise ValueError(f"{where}: groups {_names(configs, claimed)} set the same store directory {path} in "
                             f"their [[groups]] tables: give each a store_dir of its own")
        if not claimed and os.path.exists(path):
            base = configs[ks[0]].store_base_dir
            raise ValueError(f"{where}: {path} holds a store, and groups {_names(configs, ks)} would all use it: "
                             f"give the group it belongs to store_dir = \"{base}\" in its [[groups]] table (the "
                             f"others then get {os.path.join(base, '<group>', os.path.basename(path))})")
        for k in ks:
            if own_dir[k]:
                continue
            c = configs[k]
            if not _DIR_NAME.fullmatch(c.group):
                raise ValueError(f"{where}: groups {_names(configs, ks)} share the store directory {path}, and the "
                                 f"name {c.group!r} cannot name a directory of its own: give that group a "
                                 f"store_dir in its [[groups]] table")
            out[k] = c.copy(store_base_dir=os.path.join(c.store_base_dir, c.group)).validate()
    seen: dict[str, int] = {}
    for k, c in enumerate(out):
        if c.store_type != FILE:
            continue
        other = seen.setdefault(_path(c), k)
        if other != k:
            raise ValueError(f"{where}: groups {_names(out, (other, k))} would share the store directory "
                             f"{_path(c)}: give each a store_dir of its own")
    return out


__all__ = ["place"]
