"""attnserve's queue, calls in progress and cache use under the names the Gateway API Inference
Extension's endpoint picker reads by default (vLLM's, which llm-d reads too), labelled model_name as
vLLM labels them: read from attnserve's own gauges when scraped, so that a call costs nothing more."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# name -> (what it means to the endpoint picker, the attnserve gauge it reads)
NAMES = {
    "vllm:num_requests_waiting": ("Inputs waiting for the model (attnserve_queue_depth).", "queue_depth"),
    "vllm:num_requests_running": ("Calls in progress (attnserve_requests_running).", "requests_running"),
    "vllm:kv_cache_usage_perc": ("Generation cache in use, 0 to 1 (attnserve_kv_cache_usage_ratio).", "kv_cache_usage"),
    # The name the endpoint picker read before vLLM renamed it.
    "vllm:gpu_cache_usage_perc": (
        "Generation cache in use, 0 to 1 (attnserve_kv_cache_usage_ratio).",
        "kv_cache_usage",
    ),
}


# The attnserve gauges' families, by their attribute names in NAMES.
FAMILIES = {
    "queue_depth": "attnserve_queue_depth",
    "requests_running": "attnserve_requests_running",
    "kv_cache_usage": "attnserve_kv_cache_usage_ratio",
}


def extension_families(families: Mapping[str, Metric]) -> Iterator[GaugeMetricFamily]:
    """The endpoint picker's names, from attnserve's gauge families by name (each labelled `model`)."""
    for name, (documentation, source) in NAMES.items():
        family = GaugeMetricFamily(name, documentation, labels=["model_name"])
        found = families.get(FAMILIES[source])
        for sample in found.samples if found is not None else ():
            family.add_metric([sample.labels["model"]], sample.value)
        yield family


class InferenceExtensionNames(Collector):
    def __init__(self, gauges: dict[str, Gauge]):
        """gauges: attnserve's, by the attribute names NAMES gives."""
        self.gauges = gauges

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = {metric.name: metric for gauge in self.gauges.values() for metric in gauge.collect()}
        yield from extension_families(families)
