"""The files nvidia-imex reads from the daemon's directory: ``imexd.cfg`` and ``nodes.cfg``.

``imexd.cfg`` is rendered from ``imexd.cfg.tmpl`` (copied there by the kubelet plugin, as upstream
does) or, when that file is absent, from the same template built in here (docs/compatibility.md §3.3).
The template uses Go template placeholders; only the two upstream defines are known, and any other
placeholder is an error rather than being left in the config for IMEX to trip over.

``nodes.cfg`` is either the static list of every DNS name (``IMEXDaemonsWithDNSNames``: membership
changes never touch it) or the peers' IP addresses in index order (IP mode).

DNS names carry a short hash of the ComputeDomain's UID, as upstream's since #1448:
``compute-domain-daemon-<hash>-NNNN``, so two domains of the same size never have the same node list,
and IMEX refuses a peer of another domain that reached a reused pod IP (docs/compatibility.md §3.3).
The hash is the first 8 hex digits of SHA-256 of the UID string; upstream's function is not known
here, only the shape (docs/data-path.md §9.4).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from imexdra.common.errors import ConfigError

#: Every IMEX DNS name starts with this, old shape and new; the hosts file manager owns all lines
#: mentioning it, so a node upgraded from ``compute-domain-daemon-NNNN`` loses its stale lines.
DNS_NAME_PREFIX = "compute-domain-daemon-"
#: Hex digits of the domain hash in a DNS name.
DOMAIN_HASH_LENGTH = 8
#: Where a slot without a daemon points (upstream #1465): resolving it never leaves the hosts file, so
#: IMEX looking for an absent peer sends no search-domain queries to the cluster DNS; nothing listens.
UNUSED_SLOT_ADDRESS = "127.0.0.2"

CONFIG_FILE = "imexd.cfg"
TEMPLATE_FILE = "imexd.cfg.tmpl"
NODES_FILE = "nodes.cfg"

DEFAULT_TEMPLATE = """\
# nvidia-imex configuration rendered by compute-domain-daemon; IMEX reads it only at start.
LOG_LEVEL=4
# Empty: log to stderr, which ends up in the daemon pod's log.
LOG_FILE_NAME=
STATS_FILE_NAME=/var/log/nvidia-imex-stats.log
LOG_APPEND_TO_LOG=0
LOG_FILE_MAX_SIZE=1024
LOG_MAX_ROTATE_COUNT=10
LOG_USE_SYSLOG=0
# Stay in the foreground under the daemon's supervision.
DAEMONIZE=0
BIND_INTERFACE_IP=
SERVER_PORT=50000
IMEX_NODE_CONFIG_FILE={{ .IMEXDaemonNodesConfigPath }}
NETWORK_INTERFACE=
IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_ENABLE_AUTH_ENCRYPTION=0
IMEX_AUTH_ENCRYPTION_MODE=SSL_TLS
IMEX_AUTH_SOURCE=
IMEX_SERVER_KEY=
IMEX_SERVER_CERT=
IMEX_SERVER_CERT_AUTH=
IMEX_CLIENT_KEY=
IMEX_CLIENT_CERT=
IMEX_CLIENT_CERT_AUTH=
IMEX_SECURITY_TARGET_OVERRIDE=
IMEX_GSS_SERVICE_NAME=host
IMEX_GSS_TIMEOUT_SEC=30
IMEX_GSS_RETRY_INTERVAL_SEC=5
IMEX_GSS_SEC_CONTEXT_LIFETIME_SEC=-1
IMEX_GSS_SHUTDOWN_ON_FAILURE=0
# The command service nvidia-imex-ctl (and so the readiness probe) talks to.
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}
IMEX_CMD_PORT=50005
IMEX_CMD_UNIX_DOMAIN_PATH=
# Never clean up a lost peer's imports: it may come back under the same name.
IMEX_NODE_DISCONNECTED_GRACE_TIME=-1
"""

_PLACEHOLDER = re.compile(r"\{\{-?\s*\.(\w+)\s*-?\}\}")


@dataclass(frozen=True, slots=True)
class ImexdPaths:
    """The files in the daemon's IMEX directory (``/imexd`` in the pod)."""

    directory: Path

    @property
    def config(self) -> Path:
        """The rendered IMEX config."""
        return self.directory / CONFIG_FILE

    @property
    def template(self) -> Path:
        """The template the kubelet plugin provides."""
        return self.directory / TEMPLATE_FILE

    @property
    def nodes(self) -> Path:
        """The node list."""
        return self.directory / NODES_FILE


def domain_hash(domain_uid: str) -> str:
    """The short, deterministic hash of a ComputeDomain UID that DNS names carry (8 hex digits)."""
    return hashlib.sha256(domain_uid.encode()).hexdigest()[:DOMAIN_HASH_LENGTH]


def dns_name(domain_uid: str, index: int) -> str:
    """The DNS name of the domain's daemon with ``index`` (``compute-domain-daemon-1f0e33b2-0007``)."""
    return f"{DNS_NAME_PREFIX}{domain_hash(domain_uid)}-{index:04d}"


def render_template(template: str, values: Mapping[str, str]) -> str:
    """Substitute ``{{ .Name }}`` placeholders; an unknown name is a ``ConfigError``."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ConfigError(f"unknown placeholder {match.group(0)!r}", field=TEMPLATE_FILE)
        return values[name]

    return _PLACEHOLDER.sub(substitute, template)


def render_imex_config(template: str, *, nodes_config_path: Path, cmd_bind_ip: str) -> str:
    """``imexd.cfg`` for a daemon whose pod IP is ``cmd_bind_ip``."""
    return render_template(
        template,
        {"IMEXDaemonNodesConfigPath": str(nodes_config_path), "IMEXCmdBindInterfaceIP": cmd_bind_ip},
    )


def dns_nodes_config(domain_uid: str, max_nodes: int) -> str:
    """The static node list of DNS-names mode: every name the domain can ever use, one per line."""
    return "".join(f"{dns_name(domain_uid, index)}\n" for index in range(max_nodes))


def ip_nodes_config(addresses: Iterable[str]) -> str:
    """The node list of IP mode, one address per line in the given (index) order."""
    return "".join(f"{address}\n" for address in addresses)
