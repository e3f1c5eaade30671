"""metricsExporterType: the values es-broker serves (B-355), checked before anything listens."""

from __future__ import annotations

EXPORTER_TYPES = ("DISABLE", "PROM")


def check_exporter_type(value: str) -> None:
    """A metricsExporterType es-broker cannot serve stops the start, naming the values it takes."""
    if value not in EXPORTER_TYPES:
        raise ValueError(
            f"metricsExporterType={value!r} is not served by es-broker "
            f"(RocketMQ 5's OTLP_GRPC and LOG are not): use one of {', '.join(EXPORTER_TYPES)}"
        )
