"""Prometheus text read back into samples, so a test can scrape, act, scrape and compare."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of `text`, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 when it is not there (a counter not yet incremented, a labelled child not yet
    made)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def scrape(url: str) -> Samples:
    response = httpx.get(url, timeout=10.0)
    response.raise_for_status()
    return parse(response.text)
