"""Read a cleaner process's Prometheus ``/metrics`` from a benchmark (127.0.0.1 only)."""

from __future__ import annotations

import urllib.request


def metrics_text(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def scrape(port: int, name: str) -> float:
    text = metrics_text(port)
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def scrape_by_label(port: int, name: str) -> dict[str, float]:
    """A labelled counter's values by its one label's value."""
    text = metrics_text(port)
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            label = line[line.index('"') + 1 : line.rindex('"')]
            values[label] = float(line.rsplit(" ", 1)[1])
    return values
