"""Option groups more than one binary uses: logging, feature gates, API client, metrics, identity, IMEX.

The logging group has component-base's flags and variables: ``-v``/``--v``, ``--vmodule``,
``--logging-format`` (``text``, the default, or ``json``) and ``--log-flush-frequency`` (accepted;
every line is flushed as it is written). The alpha split-stream and buffer flags are not offered
(docs/logging.md). :meth:`LoggingSettings.configure` feeds ``imexdra.common.observability.logging``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

import click

from imexdra.api.featuregates import FeatureGates, resolve_feature_gates
from imexdra.api.flags.groups import GoDuration, OptionGroup, check_dns_label, check_dns_subdomain, option
from imexdra.common.errors import ConfigError
from imexdra.common.observability.verbosity import VModule, parse_vmodule


class LogFormat(StrEnum):
    """Values of ``--logging-format``."""

    TEXT = "text"
    JSON = "json"


@dataclass(frozen=True, slots=True)
class LoggingSettings:
    """klog's settings: verbosity (0 = least), per-file verbosity, line format, flush period."""

    verbosity: int
    logging_format: LogFormat = LogFormat.TEXT
    vmodule: VModule = ()
    log_flush_frequency: timedelta = timedelta(seconds=5)

    def configure(self) -> None:
        """Set up this process's logging (``imexdra.common.observability.logging``, loaded only now)."""
        from imexdra.common.observability.logging import configure_logging

        configure_logging(self.verbosity, log_format=self.logging_format.value, vmodule=self.vmodule)


def _vmodule(_ctx: click.Context, _param: click.Parameter, value: str) -> VModule:
    try:
        return parse_vmodule(value)
    except ConfigError as error:
        raise click.BadParameter(str(error).removeprefix("vmodule: ")) from error


logging_options = OptionGroup(
    "logging",
    LoggingSettings,
    option(
        "-v",
        "--v",
        "verbosity",
        envvar=["V", "LOG_VERBOSITY"],
        type=click.IntRange(min=0),
        default=0,
        help="Log verbosity, as klog's -v: a line logged at level N is shown when N <= this.",
    ),
    option(
        "--vmodule",
        envvar="VMODULE",
        callback=_vmodule,
        default="",
        help="Per-file verbosity: comma-separated pattern=N, pattern a glob on the file name without .py.",
    ),
    option(
        "--logging-format",
        envvar="LOGGING_FORMAT",
        type=click.Choice([fmt.value for fmt in LogFormat]),
        callback=lambda _ctx, _param, value: LogFormat(value),
        default=LogFormat.TEXT.value,
        help="Log line format: text (klog's layout) or json (component-base's).",
    ),
    option(
        "--log-flush-frequency",
        envvar="LOG_FLUSH_FREQUENCY",
        type=GoDuration(),
        default="5s",
        help="Accepted for upstream's command lines; every line is flushed as it is written.",
    ),
)


class FeatureGatesType(click.ParamType[FeatureGates]):
    """``Name=bool,...`` resolved into ``FeatureGates`` (overrides applied, dependencies checked)."""

    name = "gates"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> FeatureGates:
        """Resolve ``value``; a ``ConfigError`` becomes a usage error."""
        if isinstance(value, FeatureGates):
            return value
        try:
            return resolve_feature_gates(str(value))
        except ConfigError as err:
            self.fail(str(err), param, ctx)


feature_gate_options = OptionGroup(
    "feature_gates",
    lambda feature_gates: feature_gates,
    option(
        "--feature-gates",
        envvar="FEATURE_GATES",
        type=FeatureGatesType(),
        default="",
        help="Comma-separated Name=true|false pairs.",
    ),
)


@dataclass(frozen=True, slots=True)
class KubeClientSettings:
    """How to reach the API server: a kubeconfig file (``None``: in-cluster) and client rate limits."""

    kubeconfig: Path | None
    kube_api_qps: float
    kube_api_burst: int


kube_client_options = OptionGroup(
    "kube_client",
    KubeClientSettings,
    option(
        "--kubeconfig",
        envvar="KUBECONFIG",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help="Kubeconfig file; unset means the in-cluster configuration.",
    ),
    option(
        "--kube-api-qps",
        envvar="KUBE_API_QPS",
        type=click.FloatRange(min=0, min_open=True),
        default=5.0,
        help="Sustained API requests per second.",
    ),
    option(
        "--kube-api-burst",
        envvar="KUBE_API_BURST",
        type=click.IntRange(min=1),
        default=10,
        help="API request burst above the QPS.",
    ),
)


#: Paths the metrics server answers itself; a profiling prefix must not hide them.
_PROBE_PATHS = ("/healthz", "/livez", "/readyz")


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """The HTTP endpoint serving metrics (``""``: no server), the metrics path on it and the profiling path.

    ``pprof_path`` (``""``: none) is the controller's ``--pprof-path``; the kubelet plugin, like
    upstream's, has no such flag and always leaves it empty.
    """

    http_endpoint: str
    metrics_path: str
    pprof_path: str = ""

    def __post_init__(self) -> None:
        """Check the endpoint and the paths; a profiling prefix must hide neither metrics nor probes."""
        _listen_address(self.http_endpoint)
        if self.metrics_path and not self.metrics_path.startswith("/"):
            raise ConfigError(f'"{self.metrics_path}" must start with "/"', field="metrics_path")
        if not self.pprof_path:
            return
        prefix = self.pprof_path.rstrip("/")
        if not prefix.startswith("/"):
            raise ConfigError(
                f'"{self.pprof_path}" must start with "/" and not be "/" alone', field="pprof_path"
            )
        for served in (self.metrics_path, *_PROBE_PATHS):
            if served and (served == prefix or served.startswith(f"{prefix}/")):
                raise ConfigError(f'"{self.pprof_path}" would hide {served}', field="pprof_path")

    @property
    def listen_address(self) -> tuple[str, int] | None:
        """``(host, port)`` to listen on (host ``""``: all interfaces), or ``None`` when disabled."""
        return _listen_address(self.http_endpoint)


def _listen_address(endpoint: str) -> tuple[str, int] | None:
    if not endpoint:
        return None
    host, colon, port = endpoint.rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f'"{endpoint}" is not [host]:port', field="http_endpoint")
    return host.removeprefix("[").removesuffix("]"), int(port)


_http_endpoint_option = option(
    "--http-endpoint",
    envvar="HTTP_ENDPOINT",
    default="",
    help="[host]:port of the metrics server; empty disables it.",
)
_metrics_path_option = option(
    "--metrics-path", envvar="METRICS_PATH", default="/metrics", help="HTTP path of the metrics."
)
metrics_options = OptionGroup("metrics", MetricsSettings, _http_endpoint_option, _metrics_path_option)
#: The controller's: upstream's controller also serves profiles (Go's pprof) on the metrics server.
metrics_pprof_options = OptionGroup(
    "metrics",
    MetricsSettings,
    _http_endpoint_option,
    _metrics_path_option,
    option(
        "--pprof-path",
        envvar="PPROF_PATH",
        default="",
        help="HTTP path prefix of the profiling endpoints (task and thread dumps, a sampling profile); "
        "empty disables them.",
    ),
)


def _driver_namespace(namespace: str) -> str:
    check_dns_label(namespace, field="namespace")
    return namespace


namespace_options = OptionGroup(
    "namespace",
    _driver_namespace,
    option(
        "--namespace",
        envvar="NAMESPACE",
        default="default",
        help="The driver's namespace (daemon DaemonSets, daemon claim templates, cliques).",
    ),
)


def _node_name(node_name: str) -> str:
    check_dns_subdomain(node_name, field="node_name")
    return node_name


node_name_options = OptionGroup(
    "node_name",
    _node_name,
    option("--node-name", envvar="NODE_NAME", required=True, help="Name of the node this process serves."),
)


class ImexMode(StrEnum):
    """Values of ``--imex-mode``; the ``HostManagedIMEX`` feature gate is what selects host mode."""

    DRIVER_MANAGED = "driverManaged"
    HOST_MANAGED = "hostManaged"


class ImexIsolation(StrEnum):
    """Values of ``--imex-isolation`` (``""`` means ``domain``, as upstream); docs/channel-isolation.md."""

    #: Every ComputeDomain of one IMEX domain shares channel 0 (upstream's only mode).
    DOMAIN = "domain"
    #: Every ComputeDomain gets a channel of its own; host-managed IMEX only.
    CHANNEL = "channel"


def _isolation(_ctx: click.Context, _param: click.Parameter, value: str) -> ImexIsolation:
    """Parse ``--imex-isolation``; empty is upstream's old spelling of ``domain``."""
    if value == "":
        return ImexIsolation.DOMAIN
    try:
        return ImexIsolation(value)
    except ValueError:
        choices = " or ".join(f'"{isolation.value}"' for isolation in ImexIsolation)
        raise click.BadParameter(f'unknown value "{value}"; use {choices}') from None


#: The driver's default ``NVreg_ImexChannelCount`` (channels ``0 .. 2047``), which upstream hard-codes.
DEFAULT_IMEX_CHANNEL_COUNT = 2048
#: The most channels the driver can have: the module parameter is bounded by the 20-bit dev_t minor.
MAX_IMEX_CHANNEL_COUNT = 1 << 20


def _channel_count(_ctx: click.Context, _param: click.Parameter, value: str | int) -> int:
    """Parse ``--imex-channel-count``, the ``NVreg_ImexChannelCount`` of docs/channel-isolation.md §3."""
    text = str(value).strip()
    count = int(text) if text.isascii() and text.isdigit() else None
    if count is None or not 2 <= count <= MAX_IMEX_CHANNEL_COUNT:
        raise click.BadParameter(
            f'"{value}" is not a channel count: give the nodes\' NVreg_ImexChannelCount, a whole number '
            f"from 2 to {MAX_IMEX_CHANNEL_COUNT} (channels 0..count-1 exist; channel isolation hands out "
            "1..count-1, so at least channel 1 must exist); the driver's default is "
            f"{DEFAULT_IMEX_CHANNEL_COUNT}"
        )
    return count


@dataclass(frozen=True, slots=True)
class ImexSettings:
    """Upstream's IMEX mode and isolation flags; ``imexdra.api.imexmode`` says what they mean with the gates.

    ``imex_channel_count`` is ours (upstream hard-codes 2048): how many channels every node's driver
    has, read by channel isolation only.
    """

    imex_mode: ImexMode
    imex_isolation: ImexIsolation
    imex_channel_count: int = DEFAULT_IMEX_CHANNEL_COUNT


imex_options = OptionGroup(
    "imex",
    ImexSettings,
    option(
        "--imex-mode",
        envvar="IMEX_MODE",
        type=click.Choice([mode.value for mode in ImexMode]),
        callback=lambda _ctx, _param, value: ImexMode(value),
        default=ImexMode.DRIVER_MANAGED.value,
        help="Who runs nvidia-imex; hostManaged needs the HostManagedIMEX feature gate.",
    ),
    option(
        "--imex-isolation",
        envvar="IMEX_ISOLATION",
        callback=_isolation,
        default=ImexIsolation.DOMAIN.value,
        help="IMEX isolation: domain (all domains share channel 0) or channel (host-managed only).",
    ),
    option(
        "--imex-channel-count",
        envvar="IMEX_CHANNEL_COUNT",
        callback=_channel_count,
        default=str(DEFAULT_IMEX_CHANNEL_COUNT),
        help="IMEX channels on every node (the driver's NVreg_ImexChannelCount); channel isolation only.",
    ),
)
