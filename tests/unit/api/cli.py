"""Runs commands built from option groups in isolation from the host environment."""

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import click
from click.testing import CliRunner, Result

from imexdra.api.flags.common import (
    feature_gate_options,
    imex_options,
    kube_client_options,
    logging_options,
    metrics_options,
    namespace_options,
    node_name_options,
)
from imexdra.api.flags.controller import controller_options, leader_election_options
from imexdra.api.flags.daemon import daemon_options
from imexdra.api.flags.groups import OptionGroup
from imexdra.api.flags.kubelet_plugin import kubelet_plugin_options

ALL_GROUPS: list[OptionGroup[Any]] = [
    logging_options,
    feature_gate_options,
    kube_client_options,
    metrics_options,
    namespace_options,
    node_name_options,
    imex_options,
    kubelet_plugin_options,
    controller_options,
    leader_election_options,
    daemon_options,
]

CONTROLLER_ENV = {
    "POD_NAME": "controller-0",
    "IMAGE_NAME": "registry/imexdra:1",
    "LOG_VERBOSITY_CD_DAEMON": "4",
}


def env_vars(groups: list[OptionGroup[Any]]) -> set[str]:
    names: set[str] = set()
    for group in groups:
        for opt in group.options:
            envvar = opt.attrs.get("envvar")
            names |= {envvar} if isinstance(envvar, str) else set(envvar or ())
    return names


def invoke(
    groups: list[OptionGroup[Any]], args: Sequence[str] = (), env: Mapping[str, str] = MappingProxyType({})
) -> tuple[Result, dict[str, Any]]:
    """Run a command built from ``groups``; the host environment is hidden from it."""
    seen: dict[str, Any] = {}

    def command(**settings: Any) -> None:
        seen.update(settings)

    decorated: Callable[..., None] = command
    for group in reversed(groups):
        decorated = group(decorated)
    isolated: dict[str, str | None] = dict.fromkeys(env_vars(ALL_GROUPS))
    result = CliRunner().invoke(click.command()(decorated), args, env={**isolated, **env})
    return result, seen


def settings_of(
    group: OptionGroup[Any], args: Sequence[str] = (), env: Mapping[str, str] = MappingProxyType({})
) -> Any:
    result, seen = invoke([group], args, env)
    assert result.exit_code == 0, result.output
    return seen[group.dest]
