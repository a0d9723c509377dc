"""The IMEX update loop: newest membership in, files rewritten and IMEX told, in that order.

Each membership the watcher publishes is planned (``daemon.planning``) against what IMEX was last
given, the planned files are written (hosts file in place, ``nodes.cfg`` atomically), and only then
is the supervisor asked to start, reload or restart IMEX, so IMEX never reads a half-applied state.
A file that cannot be written fails the loop: the daemon exits and the kubelet restarts it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import structlog

from imexdra.common.files.atomicfile import write_atomic
from imexdra.daemon.hostsfile import update_hosts_file
from imexdra.daemon.imexconfig import UNUSED_SLOT_ADDRESS, ImexdPaths, dns_name
from imexdra.daemon.membership import Membership
from imexdra.daemon.peers import Latest
from imexdra.daemon.planning import Action, Applied, Plan, plan_dns, plan_ip
from imexdra.daemon.supervisor import ImexSupervisor

_log = structlog.get_logger(__name__)


class Updater:
    """Applies membership changes to the IMEX files and process."""

    def __init__(
        self,
        *,
        paths: ImexdPaths,
        hosts_file: Path,
        supervisor: ImexSupervisor,
        dns_names: bool,
        domain_uid: str,
        max_nodes: int,
    ) -> None:
        """Configure for DNS-names mode (``dns_names``) or IP mode, for the domain ``domain_uid``."""
        self.paths = paths
        self.hosts_file = hosts_file
        self.supervisor = supervisor
        self.dns_names = dns_names
        self.domain_uid = domain_uid
        self.max_nodes = max_nodes
        self.applied = Applied()

    async def run(self, memberships: Latest[Membership]) -> None:
        """Apply every newer membership until cancelled."""
        seen = 0
        while True:
            seen, membership = await memberships.next(seen)
            await self.apply(membership)

    async def apply(self, membership: Membership) -> Plan:
        """Plan and carry out one membership change; return the plan."""
        if self.dns_names:
            plan = plan_dns(self.applied, membership, domain_uid=self.domain_uid, max_nodes=self.max_nodes)
        else:
            plan = plan_ip(self.applied, membership)
        for peer in plan.invalid:
            _log.error(
                "Daemon index out of range", node=peer.node_name, index=peer.index, max_nodes=self.max_nodes
            )
        _log.info(
            "IMEX domain membership",
            members=[
                f"{dns_name(self.domain_uid, p.index)} -> {p.ip} ({p.node_name})" for p in membership.peers
            ],
            own_index=membership.own.index if membership.own else None,
            action=plan.action.value,
            reason=plan.reason,
        )
        if plan.hosts is not None and await asyncio.to_thread(update_hosts_file, self.hosts_file, plan.hosts):
            unused = sum(1 for ip in plan.hosts.values() if ip == UNUSED_SLOT_ADDRESS)
            _log.info(
                "Hosts file updated", path=str(self.hosts_file), mappings=len(plan.hosts), unused_slots=unused
            )
        if plan.nodes_config is not None:
            data = plan.nodes_config.encode()
            await asyncio.to_thread(write_atomic, self.paths.nodes, data, mode=0o644)
            _log.info("Nodes config written", path=str(self.paths.nodes), nodes=plan.nodes_config.split())
        self.applied = plan.applied
        if plan.action is Action.START:
            self.supervisor.start()
        elif plan.action is Action.RELOAD:
            self.supervisor.reload()
        elif plan.action is Action.RESTART:
            self.supervisor.restart()
        return plan
