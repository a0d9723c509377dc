"""Rendering imexd.cfg (both modes) and the two shapes of nodes.cfg."""

from __future__ import annotations

from pathlib import Path

import pytest

from imexdra.common.errors import ConfigError
from imexdra.daemon.imexconfig import (
    DEFAULT_TEMPLATE,
    dns_name,
    dns_nodes_config,
    ip_nodes_config,
    render_imex_config,
    render_template,
)
from imexdra.devices.imex import parse_config


def test_default_template_renders_upstream_values() -> None:
    """The built-in template yields upstream's settings with the node list path and the pod IP filled in."""
    rendered = render_imex_config(
        DEFAULT_TEMPLATE, nodes_config_path=Path("/imexd/nodes.cfg"), cmd_bind_ip="10.1.2.3"
    )
    config = parse_config(rendered)
    assert "{{" not in rendered
    assert config["IMEX_NODE_CONFIG_FILE"] == "/imexd/nodes.cfg"
    assert config["IMEX_CMD_BIND_INTERFACE_IP"] == "10.1.2.3"
    expected = {
        "SERVER_PORT": "50000",
        "IMEX_CMD_PORT": "50005",
        "IMEX_CMD_ENABLED": "1",
        "DAEMONIZE": "0",
        "LOG_FILE_NAME": "",
        "IMEX_WAIT_FOR_QUORUM": "RECOVERY",
        "IMEX_ENABLE_AUTH_ENCRYPTION": "0",
        "IMEX_NODE_DISCONNECTED_GRACE_TIME": "-1",
        "BIND_INTERFACE_IP": "",
    }
    assert {key: config[key] for key in expected} == expected


@pytest.mark.parametrize(
    "template",
    ["X={{ .IMEXCmdBindInterfaceIP }}", "X={{.IMEXCmdBindInterfaceIP}}", "X={{- .IMEXCmdBindInterfaceIP -}}"],
    ids=["spaced", "tight", "trim-markers"],
)
def test_go_template_placeholder_spellings(template: str) -> None:
    """The Go template spellings upstream's template could use all render."""
    assert render_template(template, {"IMEXCmdBindInterfaceIP": "fd00::1"}) == "X=fd00::1"


def test_unknown_placeholder_is_an_error() -> None:
    """A placeholder the daemon does not define fails instead of reaching IMEX verbatim."""
    with pytest.raises(ConfigError, match="IMEXSomethingElse"):
        render_template("A={{ .IMEXSomethingElse }}", {})


@pytest.mark.parametrize(
    ("index", "name"),
    [
        (0, "compute-domain-daemon-0000"),
        (17, "compute-domain-daemon-0017"),
        (1234, "compute-domain-daemon-1234"),
    ],
)
def test_dns_names_are_zero_padded(index: int, name: str) -> None:
    """DNS names use four digits (upstream %04d), not the bare index."""
    assert dns_name(index) == name


def test_dns_nodes_config_lists_every_slot() -> None:
    """DNS-names mode writes all max names, each newline-terminated."""
    text = dns_nodes_config(3)
    assert text == "compute-domain-daemon-0000\ncompute-domain-daemon-0001\ncompute-domain-daemon-0002\n"
    assert len(dns_nodes_config(18).splitlines()) == 18


def test_ip_nodes_config_keeps_order() -> None:
    """IP mode writes the addresses in the given (index) order."""
    assert ip_nodes_config(["10.0.0.9", "10.0.0.2"]) == "10.0.0.9\n10.0.0.2\n"
    assert ip_nodes_config([]) == ""
