"""The verdict on a leader's damaged entry that no peer gave a copy of (core.damaged_tail):
never committed when the answers of voters that every quorum meets, none recovering, say
their logs end before it (a); or, in a group of three or more, when every other voter says
so, recovering or not (b: no intact copy exists, and a committed entry keeps one)."""

from __future__ import annotations

import pytest

from dledger.core.damaged_tail import never_committed
from dledger.core.quorum import Majority

THREE = ["a", "b", "c"]
FIVE = ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize("voters,absent,rule", [
    (THREE, {}, None),
    (THREE, {"b": False}, None),                                  # c may hold it
    (THREE, {"b": True}, None),
    (THREE, {"b": False, "c": False}, "a"),
    (THREE, {"b": True, "c": False}, "b"),                        # b may have lost its copy
    (THREE, {"b": True, "c": True}, "b"),
    (THREE, {"a": False, "b": False}, None),                      # the leader's own answer counts for nothing
    (FIVE, {"b": False, "c": False, "d": False}, "a"),            # e silent: every quorum meets b, c, d
    (FIVE, {"b": False, "c": False, "d": True}, None),            # e silent, d recovering
    (FIVE, {"b": False, "c": False, "d": True, "e": True}, "b"),
    (FIVE, {"b": True, "c": True, "d": True, "e": True}, "b"),
    (["a"], {}, None),                                            # alone: its copy was the only one
    (["a", "b"], {"b": False}, "a"),
    (["a", "b"], {"b": True}, None),                              # two members tolerate no lost copy
])
def test_the_verdict_table(voters, absent, rule):
    why = never_committed(Majority(voters), "a", absent)
    if rule is None:
        assert why is None
    elif rule == "a":
        assert why is not None and "not recovering" in why
    else:
        assert why is not None and "no intact copy" in why
