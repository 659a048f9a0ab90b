"""Gateway sessions: DIAL session ids scoped to their API key, mapped onto engine sessions.

A caller's ``sessionId`` is only a name in that caller's scope: it never reaches the engine or
the file system (the engine picks its own ids and folders), so two keys may use the same id and
neither can see the other's session (404). A session keeps its owner and id as labels, so one
paused across a restart (SIGTERM pauses them to the data folder) is found again under both and
resumes on its next operation; one that was running at a SIGKILL answers DIAL's 404, as after
idle expiry. Idle expiry itself is the engine's; an expired engine session reads as gone here.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import NoReturn
from urllib.parse import unquote

import anyio

from corral.errors import SessionClosed, SessionNotFound
from corral.http._engine_api import EngineAPI, SessionAPI
from corral.http._errors import fail
from corral.network import NO_NETWORK, SandboxNetwork

__all__ = ["TRUNCATED_HEADER", "Registry", "listing_headers", "not_found", "valid_session_id"]

DIAL_OWNER, DIAL_ID = "dial.owner", "dial.session_id"
"""A DIAL session's labels: whose it is and its id in that key's scope."""
_MAX_ID_BYTES = 800  # DIAL bounds the session's whole storage path to 900 bytes

TRUNCATED_HEADER = "Corral-Listing-Truncated"
"""Set to ``true`` on a file listing cut at ``list_max_entries``: DIAL's body has no room."""


def listing_headers(files: object) -> dict[str, str] | None:
    """The headers of a listing response: says so when the listing was cut."""
    return {TRUNCATED_HEADER: "true"} if getattr(files, "truncated", False) else None


def valid_session_id(value: str) -> bool:
    """DIAL's session id rule (docs/dial.md §5.5), plus no ``.``/``..`` segments."""
    if (
        not value
        or value.endswith("/")
        or len(value.encode("utf-8", "surrogatepass")) > _MAX_ID_BYTES
    ):
        return False
    for segment in value.split("/"):
        decoded = unquote(segment)
        if not decoded or decoded in (".", ".."):
            return False
        if any(c in "/{}" or ord(c) <= 0x1F or 0xD800 <= ord(c) <= 0xDFFF for c in decoded):
            return False
    return True


def not_found(session_id: str) -> NoReturn:
    fail(404, f"Session is not found: {session_id}")


@dataclass(slots=True)
class _Entry:
    session: SessionAPI | None = None
    """None while the engine is still opening it: the id is taken but not yet visible."""
    closed: bool = False
    cancel: anyio.Event = field(default_factory=anyio.Event)
    """Set by ``close``: runs in the session stop at once (DIAL: the caller then gets 404)."""


class Registry:
    """Open sessions by ``(owner, sessionId)``, at most ``max_per_owner`` each."""

    def __init__(self, engine: EngineAPI, max_per_owner: int) -> None:
        self._engine = engine
        self._max = max_per_owner
        self._owners: dict[str, dict[str, _Entry]] = {}

    def adopt(self) -> int:
        """Take back the sessions a DIAL caller opened before a restart (the engine adopted
        them paused); returns how many."""
        count = 0
        for session in self._engine.sessions():
            if session.paused is None:
                continue  # a running one is another app's (tests share an engine), never ours
            owner, sid = session.labels.get(DIAL_OWNER), session.labels.get(DIAL_ID)
            if owner is not None and sid is not None and valid_session_id(sid):
                self._owners.setdefault(owner, {})[sid] = _Entry(session=session)
                count += 1
        return count

    def _alive(self, entry: _Entry) -> bool:
        if entry.session is None:
            return not entry.closed
        if entry.closed:
            return False
        try:
            self._engine.get_session(entry.session.id)
        except (SessionNotFound, SessionClosed):
            return False
        return True

    def _prune(self, owner: str) -> dict[str, _Entry]:
        entries = self._owners.setdefault(owner, {})
        for sid in [sid for sid, entry in entries.items() if not self._alive(entry)]:
            del entries[sid]
        return entries

    async def open(
        self,
        owner: str,
        session_id: str | None,
        *,
        network: SandboxNetwork = NO_NETWORK,
        template: str = "",
        snapshot: str | None = None,
    ) -> str:
        """Open a session for ``owner``; returns its id.

        Raises:
            HTTPException: 400 invalid or taken id, 429 too many sessions.
            SnapshotNotFound: no such snapshot of ``owner``'s.
            SnapshotError: the snapshot cannot be read.
        """
        sid = uuid.uuid4().hex if session_id is None else session_id
        if not valid_session_id(sid):
            fail(400, f"Invalid sessionId: {sid}")
        entries = self._prune(owner)
        if sid in entries:
            fail(400, f"Session already exists: {sid}")
        self._check_room(entries)
        entry = entries[sid] = _Entry()
        try:
            session = await self._engine.open_session(
                tenant=owner, network=network, template=template, snapshot=snapshot
            )
        except BaseException:
            entries.pop(sid, None)
            raise
        entry.session = session
        session.labels.update({DIAL_OWNER: owner, DIAL_ID: sid})  # found again after a restart
        if entry.closed:  # closed while it was opening; nothing may outlive the close
            with anyio.CancelScope(shield=True):
                await session.close()
        return sid

    def _check_room(self, entries: dict[str, _Entry]) -> None:
        if len(entries) >= self._max:
            fail(
                429,
                f"Too many open sessions for this API key (limit {self._max}); close a "
                "session, wait for a run with inputFiles or outputFiles to finish (its "
                "temporary session counts too) or for idle sessions to expire",
            )

    def lookup(self, owner: str, session_id: str) -> SessionAPI:
        """The caller's session.

        Raises:
            HTTPException: 400 ``Invalid sessionId``, 404 ``Session is not found``.
        """
        if not valid_session_id(session_id):
            fail(400, f"Invalid sessionId: {session_id}")
        entry = self._owners.get(owner, {}).get(session_id)
        if entry is None or entry.session is None or not self._alive(entry):
            self._owners.get(owner, {}).pop(session_id, None)
            not_found(session_id)
        return entry.session

    def cancel_event(self, owner: str, session_id: str) -> anyio.Event:
        """Pass it as ``cancel=`` to runs in the session; ``close`` sets it."""
        entry = self._owners.get(owner, {}).get(session_id)
        return entry.cancel if entry is not None else anyio.Event()

    def is_closed(self, owner: str, session: SessionAPI, session_id: str) -> bool:
        """Whether ``session`` was closed (or expired) since it was looked up."""
        entry = self._owners.get(owner, {}).get(session_id)
        return entry is None or entry.session is not session or not self._alive(entry)

    async def close(self, owner: str, session_id: str) -> None:
        """Close the caller's session; a run still going in it is cancelled by the engine.

        Raises:
            HTTPException: 400 ``Invalid sessionId``, 404 ``Session is not found``.
        """
        session = self.lookup(owner, session_id)
        entry = self._owners[owner].pop(session_id)
        entry.closed = True
        entry.cancel.set()
        with anyio.CancelScope(shield=True):
            await session.close()

    @contextlib.asynccontextmanager
    async def temporary(self, owner: str) -> AsyncIterator[SessionAPI]:
        """A session nobody else can name, closed on every way out (docs/dial.md §5.8).

        It counts against ``owner``'s sessions while it lives.

        Raises:
            HTTPException: 429 too many sessions.
        """
        entries = self._prune(owner)
        self._check_room(entries)
        # A control character: no caller's sessionId can name this entry.
        name = f"\x00temporary-{uuid.uuid4().hex}"
        entries[name] = _Entry()
        try:
            session = await self._engine.open_session(tenant=owner)
            session.keep_on_shutdown = False
            entries[name].session = session
            try:
                yield session
            finally:
                with anyio.CancelScope(shield=True):
                    await session.close()
        finally:
            entries.pop(name, None)
