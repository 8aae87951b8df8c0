"""The metrics of a server split across processes (--api-processes N), exposed as one: the engine process's
own registry and the API processes' series, which prometheus-client's multiprocess mode writes to files in
a shared directory, summed where both have a series."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.samples import Sample

from .inference_extension_metrics import extension_families

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # set in an API process before prometheus_client is imported


class SummedMetrics:
    """A collector of the engine's registry and the API processes' series (their files, or their registries
    where tests run both sides in one process): one family per name, a series in several counted once (its
    values summed; a _created time, the earliest)."""

    def __init__(self, *sources):
        self.sources = sources  # each with collect()

    def collect(self):
        families: dict[str, object] = {}
        samples: dict[str, dict[tuple, Sample]] = {}
        for family in [family for source in self.sources for family in source.collect()]:
            kept = families.setdefault(family.name, family)
            merged = samples.setdefault(family.name, {})
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                if key in merged:
                    old = merged[key]
                    both = min if sample.name.endswith("_created") else sum
                    sample = old._replace(value=both((old.value, sample.value)))
                merged[key] = sample
            if kept is not family and not kept.documentation:
                kept.documentation = family.documentation
        for name, family in families.items():
            family.samples = list(samples[name].values())
        # The endpoint picker's names, again from the sums (the engine's own count no API process's calls).
        extension = {family.name: family for family in extension_families(families)}
        yield from (extension.get(name, family) for name, family in families.items())


def summed_registry(own: CollectorRegistry, directory: str) -> CollectorRegistry:
    """A registry to expose: the engine's metrics and the API processes'."""
    return summed(own, MultiProcessCollector(None, directory))


def summed(*sources) -> CollectorRegistry:
    """A registry of the sources' metrics, summed."""
    registry = CollectorRegistry()
    registry.register(SummedMetrics(*sources))
    return registry


def process_gone(pid: int, directory: str) -> None:
    """An API process has exited: its live gauges (calls running) leave the sums."""
    mark_process_dead(pid, directory)
