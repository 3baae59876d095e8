"""docs/catalogue.md describes the tests as they are: every test it names exists, and every
scenario id of the catalogue has exactly one row."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "catalogue.md"
AREAS = {"EL": 13, "RP": 14, "MB": 7, "ST": 22, "NW": 11, "CL": 9, "BI": 10, "SC": 9}


def _rows() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| ([A-Z]{2}-\d\d) \|", line)
        if m:
            assert m.group(1) not in rows, f"two rows for {m.group(1)}"
            rows[m.group(1)] = line
    return rows


def _names_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def test_every_scenario_of_the_catalogue_has_one_row():
    rows = _rows()
    expected = {f"{area}-{k:02d}" for area, n in AREAS.items() for k in range(1, n + 1)}
    assert set(rows) == expected


def test_every_test_the_catalogue_names_exists():
    missing, named = [], 0
    for row in _rows().values():
        for cell in re.findall(r"`([^`]+)`", row):
            m = re.fullmatch(r"([\w/]+\.py)(?:::(\w+?)\*?)?(?: \(.*\))?", cell)
            if m and (ROOT / "tests" / m.group(1)).exists():
                current = ROOT / "tests" / m.group(1)
                names = _names_in(current)
                if m.group(2):
                    named += 1
                    if not any(n.startswith(m.group(2)) for n in names):
                        missing.append(cell)
            elif cell.startswith("::"):
                named += 1
                name = cell[2:].rstrip("*")
                if not any(n.startswith(name) for n in _names_in(current)):
                    missing.append(f"{current.name}{cell}")
            elif m:
                missing.append(cell)
    assert named > 100 and missing == []
