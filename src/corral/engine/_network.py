"""A sandbox's network: its link out opened when its run or session asks for one.

A run or session that asks for none costs nothing here: no link, no thread, no rule. One
that asks gets a link into its own namespace (``corral.network``) for as long as its worker
or holder lives, judged by the policy it asked for, always inside the server's ceiling.
"""

from __future__ import annotations

import anyio
import anyio.abc

from corral.errors import IsolationError, NetworkUnavailable
from corral.network import Egress, EgressLink, SandboxNetwork, nftables_available, open_link

__all__ = ["Networks", "SessionNetwork"]


class Networks:
    """The engine's egress side, if it has one, and the links of its sandboxes."""

    def __init__(self, egress: Egress | None) -> None:
        self.egress = egress
        self.unavailable = "" if egress is not None else "this server gives sandboxes no network"
        """Why no sandbox can have a network ("" when one can)."""
        self.task_group: anyio.abc.TaskGroup | None = None

    def start(self, task_group: anyio.abc.TaskGroup) -> None:
        self.task_group = task_group
        if self.egress is not None:
            missing = nftables_available()
            if missing:
                self.unavailable = missing

    def check(self, policy: SandboxNetwork) -> SandboxNetwork:
        """``policy`` held inside the server's ceiling.

        Raises:
            NetworkUnavailable: ``policy`` allows something this server cannot give.
            NetworkPolicyError: it allows more than the ceiling.
        """
        if not policy.enabled:
            return policy
        if self.unavailable or self.egress is None:
            raise NetworkUnavailable(f"no network for this sandbox: {self.unavailable}")
        return self.egress.ceiling.bound(policy)

    async def open(
        self, pidfd: int | None, policy: SandboxNetwork, *, tenant: str, sandbox: str
    ) -> EgressLink | None:
        """The sandbox's link when its policy allows anything (None when it allows nothing).

        Raises:
            NetworkUnavailable: the server cannot give it one (no egress, no nftables, no
                namespace to enter: the in-process twin has none).
        """
        if not policy.enabled:
            return None
        policy = self.check(policy)
        egress, tg = self.egress, self.task_group
        if egress is None or tg is None or pidfd is None:
            raise NetworkUnavailable("no network for this sandbox: it has no namespace of its own")
        try:
            sockets = await anyio.to_thread.run_sync(open_link, pidfd)
        except IsolationError as exc:
            raise NetworkUnavailable(str(exc)) from exc
        return await egress.attach(sockets, policy, tenant=tenant, sandbox=sandbox, task_group=tg)


class SessionNetwork:
    """A session's policy and link: opened, replaced and closed with the session."""

    def __init__(self, networks: Networks, policy: SandboxNetwork, link: EgressLink | None):
        self._networks = networks
        self.policy = policy
        self._link = link

    async def update(
        self, policy: SandboxNetwork, pidfd: int | None, tenant: str, sid: str
    ) -> None:
        # A link once made stays, judging by the new policy (one that allows nothing
        # refuses every name and connection): its routes and rules are in the namespace.
        if self._link is not None:
            self._link.update(self._networks.check(policy))
        else:
            sandbox = f"session-{sid[:12]}"
            self._link = await self._networks.open(pidfd, policy, tenant=tenant, sandbox=sandbox)
        self.policy = policy

    def close(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None
