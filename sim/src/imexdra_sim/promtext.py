"""Reading Prometheus metrics in tests and benchmarks: one parser, one sum, the apiserver's own figures.

A reading is every sample by (sample name, sorted labels), so two readings subtract key by key.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from imexdra_sim.localcluster.cluster import LocalCluster

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""Every sample of one reading, by (sample name, sorted labels)."""


def parse_metrics(text: str) -> Samples:
    """Prometheus text exposition → :data:`Samples`."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(
        value
        for (sample, sample_labels), value in samples.items()
        if sample == name and all((k, v) in sample_labels for k, v in labels.items())
    )


def apiserver_metrics(cluster: LocalCluster) -> Samples:
    """The kube-apiserver's own /metrics (read with the admin credentials)."""
    return parse_metrics(cluster.kubectl("get", "--raw", "/metrics", timeout=60).stdout)
