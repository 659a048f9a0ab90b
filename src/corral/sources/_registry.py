"""One invocation's source inventory: opaque ids for attachments and read_source texts."""

from __future__ import annotations

import builtins
import datetime
import functools
import hashlib
import secrets
import threading
import time
from collections.abc import Callable, Sequence

from corral._mime import TEXT_PLAIN
from corral.engine import Input
from corral.errors import SourceError, SourceNotFound, SourceTooLarge, UnsupportedSource
from corral.sources._ingest import ingest
from corral.sources._limits import DEFAULT_SOURCE_LIMITS, SourceLimits
from corral.sources._source import Source, SourceInfo, SourceKind

__all__ = ["SourceRegistry"]

# 16 random bytes (128 bits) in URL-safe base64; the prefix keeps an id from starting with
# "-", which command lines and file names read as an option.
_ID_PREFIX = "src_"
_ID_BYTES = 16
# Display names are cut to what common file systems allow for one name.
_NAME_CHARS = 255
# Ids echoed in errors come from the model and may be anything, so they are clipped.
_SHOWN_ID_CHARS = 40


class SourceRegistry:
    """The sources of one agent invocation, under unguessable ids.

    Ids are 128-bit random tokens held in this object alone: an id from another registry,
    an invented one, a removed or an expired one all fail the same way. Ingestion runs
    outside the lock, so callers may offload :meth:`add_attachment` to a worker thread.

    Args:
        limits: size bounds for ingestion and for the whole inventory.
        ttl: seconds a source stays usable after registration; None keeps it for the
            registry's lifetime.
        clock: monotonic seconds, for expiry; tests pass a fake one.
    """

    def __init__(
        self,
        *,
        limits: SourceLimits = DEFAULT_SOURCE_LIMITS,
        ttl: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl is not None and not ttl > 0:
            raise ValueError(f"ttl must be positive seconds or None, not {ttl!r}")
        self._limits = limits
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[Source, float | None]] = {}

    def add_attachment(self, data: bytes, filename: str, media_type: str | None = None) -> Source:
        """Ingest a request attachment and register it.

        Args:
            data: the attachment's bytes.
            filename: its file name; the extension decides when ``media_type`` does not.
            media_type: its declared media type, if any.

        Returns:
            The registered source, with canonical text and the original bytes.

        Raises:
            UnsupportedSource: the format is not supported or the bytes are corrupt.
            SourceTooLarge: the attachment, its text or the inventory would exceed a bound.
            SourceError: the inventory already holds ``limits.max_count`` sources.
        """
        original = bytes(data)
        ingested = ingest(original, filename, media_type, limits=self._limits)
        return self._register(
            kind="attachment",
            filename=filename,
            media_type=ingested.media_type,
            text=ingested.text,
            original=original,
        )

    def add_text(
        self,
        text: str,
        name: str,
        *,
        kind: SourceKind = "read_source",
        media_type: str = TEXT_PLAIN,
    ) -> Source:
        """Register a text another tool produced (e.g. a successful ``read_source``).

        Args:
            text: the representation, kept exactly as given.
            name: a display name.
            kind: which inventory it belongs to.
            media_type: the media type of ``text``.

        Returns:
            The registered source; it has no original bytes.

        Raises:
            UnsupportedSource: ``text`` cannot be encoded as UTF-8 (lone surrogates).
            SourceTooLarge: the text or the inventory would exceed a bound.
            SourceError: the inventory already holds ``limits.max_count`` sources.
        """
        try:
            encoded = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UnsupportedSource(f"the text is not encodable as UTF-8: {exc.reason}") from exc
        if len(encoded) > self._limits.text_bytes:
            raise SourceTooLarge(
                f"the text has {len(encoded)} bytes, over the bound of {self._limits.text_bytes}"
            )
        return self._register(
            kind=kind, filename=name, media_type=media_type, text=encoded, original=None
        )

    def get(self, source_id: str) -> Source:
        """Return the live source with this id.

        Raises:
            SourceNotFound: the id is unknown here, removed or expired.
        """
        with self._lock:
            self._purge()
            entry = self._entries.get(source_id) if isinstance(source_id, str) else None
        if entry is None:
            raise SourceNotFound(
                f"no source {_show(source_id)} in this invocation (unknown, removed or expired)"
            )
        return entry[0]

    def resolve(self, ids: Sequence[str], *, max_sources: int = 4) -> builtins.list[Source]:
        """Resolve the ids one call names, all or nothing, in the order given.

        Args:
            ids: source ids, each listed once.
            max_sources: how many ids one call may name.

        Returns:
            The sources, in the order of ``ids``.

        Raises:
            SourceNotFound: an id is unknown here, removed or expired.
            SourceError: ``ids`` is malformed, names more than ``max_sources`` ids, or lists
                one twice.
        """
        if isinstance(ids, str | bytes):
            raise SourceError("source ids must be a list of ids, not a single string")
        wanted = builtins.list(ids)
        if len(wanted) > max_sources:
            raise SourceError(f"at most {max_sources} source ids per call, got {len(wanted)}")
        seen: set[str] = set()
        for source_id in wanted:
            if not isinstance(source_id, str):
                raise SourceError(f"a source id must be a string, not {type(source_id).__name__}")
            if source_id in seen:
                raise SourceError(f"source id {_show(source_id)} is listed twice; list it once")
            seen.add(source_id)
        return [self.get(source_id) for source_id in wanted]

    def to_input(self, source: Source) -> Input:
        """The engine's view of a live source of this registry, ready to mount.

        Raises:
            SourceNotFound: the source is not (or no longer) registered here.
        """
        if self.get(source.id) is not source:
            raise SourceNotFound(f"source {_show(source.id)} does not belong to this invocation")
        # The code also finds the source under its own name; a name no file can have
        # (empty, "..", too long) mounts it by id only.
        name = source.filename.replace("\\", "/").rsplit("/", 1)[-1]
        make = functools.partial(
            Input,
            id=source.id,
            text=source.text,
            original=source.original,
            media_type=source.media_type,
            text_sha256=source.text_sha256,
            original_sha256=source.original_sha256,
        )
        try:
            return make(name=name)
        except ValueError:
            return make()

    def remove(self, source_id: str) -> None:
        """Forget a source; its id stops resolving.

        Raises:
            SourceNotFound: the id is unknown here, removed or expired.
        """
        self.get(source_id)
        with self._lock:
            self._entries.pop(source_id, None)

    @property
    def total_bytes(self) -> int:
        """Bytes the live sources hold (text plus original)."""
        with self._lock:
            self._purge()
            return sum(source.size for source, _ in self._entries.values())

    def __len__(self) -> int:
        with self._lock:
            self._purge()
            return len(self._entries)

    def list(self) -> builtins.list[SourceInfo]:
        """Metadata of the live sources, oldest first; no content."""
        with self._lock:
            self._purge()
            return [source.info() for source, _ in self._entries.values()]

    def _register(
        self,
        *,
        kind: SourceKind,
        filename: str,
        media_type: str,
        text: bytes,
        original: bytes | None,
    ) -> Source:
        text_sha256 = hashlib.sha256(text).hexdigest()
        original_sha256 = hashlib.sha256(original).hexdigest() if original is not None else None
        size = len(text) + (len(original) if original is not None else 0)
        with self._lock:
            self._purge()
            if len(self._entries) >= self._limits.max_count:
                raise SourceError(f"this invocation already holds {self._limits.max_count} sources")
            held = sum(source.size for source, _ in self._entries.values())
            if held + size > self._limits.total_bytes:
                raise SourceTooLarge(
                    f"this invocation's sources would hold {held + size} bytes, over the "
                    f"bound of {self._limits.total_bytes}"
                )
            source_id = _new_id()
            while source_id in self._entries:  # pragma: no cover - 2**-128 per pair
                source_id = _new_id()
            source = Source(
                id=source_id,
                kind=kind,
                filename=_display_name(filename),
                media_type=media_type,
                text=text,
                original=original,
                text_sha256=text_sha256,
                original_sha256=original_sha256,
                created_at=datetime.datetime.now(datetime.UTC),
            )
            expires = self._clock() + self._ttl if self._ttl is not None else None
            self._entries[source_id] = (source, expires)
        return source

    def _purge(self) -> None:
        now = self._clock()
        expired = [
            key for key, (_, ends) in self._entries.items() if ends is not None and now >= ends
        ]
        for key in expired:
            del self._entries[key]


def _new_id() -> str:
    return _ID_PREFIX + secrets.token_urlsafe(_ID_BYTES)


def _display_name(filename: str) -> str:
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    return "".join(c if c.isprintable() else " " for c in base)[:_NAME_CHARS]


def _show(source_id: object) -> str:
    text = repr(source_id)
    return text if len(text) <= _SHOWN_ID_CHARS else text[: _SHOWN_ID_CHARS - 3] + "..."
