"""The state diagrams in docs/architecture.md are drawn from the transition tables in
the code; this test regenerates them and fails when the docs fall behind."""

import pathlib

from dledger.core.entry_pusher import TRANSITIONS
from dledger.core.member_state import ROLE_TRANSITIONS

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def role_diagram() -> str:
    lines = ["stateDiagram-v2", "    [*] --> CANDIDATE: start"]
    lines += [f"    {a.value} --> {b.value}: {why}" for a, b, why in ROLE_TRANSITIONS]
    return "\n".join(lines)


def dispatcher_diagram() -> str:
    lines = ["stateDiagram-v2", "    [*] --> COMPARE: becomes leader"]
    lines += [f"    {a.value} --> {b.value}" for a, targets in TRANSITIONS.items() for b in targets if a is not b]
    return "\n".join(lines)


def test_docs_carry_the_generated_diagrams():
    text = DOC.read_text()
    assert role_diagram() in text, "regenerate the role diagram:\n" + role_diagram()
    assert dispatcher_diagram() in text, "regenerate the dispatcher diagram:\n" + dispatcher_diagram()
