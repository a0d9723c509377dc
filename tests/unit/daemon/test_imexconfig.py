"""Rendering imexd.cfg (both modes), the two shapes of nodes.cfg and the per-domain DNS names."""

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

#: Two ComputeDomain UIDs and the first 8 hex digits of SHA-256 of each, worked out once by hand
#: (``hashlib.sha256(uid.encode()).hexdigest()[:8]``) so that a change of the hash fails here.
UID = "4c1d2a8e-7f3b-4e0a-9b6d-2e5f8a1c3d70"
UID_HASH = "64f89983"
OTHER_UID = "0b9e8f1a-3c2d-4e5f-8a7b-6c5d4e3f2a10"
OTHER_UID_HASH = "f50cf600"


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
    ("uid", "index", "name"),
    [
        (UID, 0, f"compute-domain-daemon-{UID_HASH}-0000"),
        (UID, 17, f"compute-domain-daemon-{UID_HASH}-0017"),
        (UID, 1234, f"compute-domain-daemon-{UID_HASH}-1234"),
        (OTHER_UID, 0, f"compute-domain-daemon-{OTHER_UID_HASH}-0000"),
    ],
    ids=["first", "last-of-18", "four-digits", "other-domain"],
)
def test_dns_names_carry_the_domain_hash(uid: str, index: int, name: str) -> None:
    """Upstream #1448's shape: prefix, 8 hex digits of the domain UID's hash, the index as %04d."""
    assert dns_name(uid, index) == name


def test_dns_nodes_config_lists_every_slot() -> None:
    """DNS-names mode writes all max names of the domain, each newline-terminated."""
    text = dns_nodes_config(UID, 3)
    assert text == "".join(f"compute-domain-daemon-{UID_HASH}-{i:04d}\n" for i in range(3))
    assert len(dns_nodes_config(UID, 18).splitlines()) == 18


def test_same_sized_domains_get_different_node_lists() -> None:
    """Two domains of one size no longer share a node list, so IMEX's node-map check tells them apart."""
    assert dns_nodes_config(UID, 18) != dns_nodes_config(OTHER_UID, 18)
    assert dns_nodes_config(UID, 18) == dns_nodes_config(UID, 18)


def test_ip_nodes_config_keeps_order() -> None:
    """IP mode writes the addresses in the given (index) order."""
    assert ip_nodes_config(["10.0.0.9", "10.0.0.2"]) == "10.0.0.9\n10.0.0.2\n"
    assert ip_nodes_config([]) == ""
