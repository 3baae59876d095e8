"""Scraping a metrics endpoint over HTTP and reading samples out of the Prometheus text."""

from __future__ import annotations

import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

WAIT = 10.0


def scrape(url: str, timeout: float = WAIT) -> dict[tuple[str, frozenset], float]:
    """``{(sample name, frozenset of label pairs): value}`` of one scrape."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples, name: str, **labels) -> float:
    return samples[(name, frozenset(labels.items()))]


def scrape_until(url: str, predicate, timeout: float = WAIT):
    """Scrape until ``predicate(samples)`` holds; the last samples (the test asserts on them)."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(url)
        if predicate(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.02)
