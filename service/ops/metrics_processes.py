"""The metrics of a server split across processes (--api-processes N), exposed as one: the engine process's
own registry and the API processes' series, which prometheus-client's multiprocess mode writes to files in
a shared directory, summed where both have a series; and each API process's CPU time and memory."""

from __future__ import annotations

import os
from collections.abc import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
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


class ApiProcessUsage:
    """Each API process's CPU time and resident memory, read from /proc when scraped (the process_* series are
    the engine process's own, as prometheus-client's ProcessCollector gives them): for sizing --api-processes.
    A process started again counts from 0 under its number, as a restarted server's counters do."""

    def __init__(self, processes: Callable[[], list[tuple[int, int]]]):
        """processes: the running API processes, (number from 1, pid) each."""
        self.processes = processes
        self.ticks = os.sysconf("SC_CLK_TCK")
        self.page = os.sysconf("SC_PAGE_SIZE")

    def collect(self):
        cpu = CounterMetricFamily(
            "attnserve_api_process_cpu_seconds", "CPU time (user and system) of an API process.", labels=["process"]
        )
        memory = GaugeMetricFamily(
            "attnserve_api_process_resident_memory_bytes", "Resident memory of an API process.", labels=["process"]
        )
        for number, pid in self.processes():
            try:
                with open(f"/proc/{pid}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()  # after the command's name, which may hold spaces
            except OSError:  # gone between the list and the read: its watcher is starting another
                continue
            cpu.add_metric([str(number)], (int(fields[11]) + int(fields[12])) / self.ticks)  # utime, stime
            memory.add_metric([str(number)], int(fields[21]) * self.page)  # rss, in pages
        yield cpu
        yield memory
