"""Invocation-local sources: attachments ingested to canonical text, under opaque ids.

Above: tools and front ends, which register attachments and ``read_source`` texts and pass
the ids a call names to :meth:`SourceRegistry.resolve`. Below: corral.engine, whose
:class:`~corral.engine.Input` :meth:`SourceRegistry.to_input` produces. Knows no tool
schemas, quotas or wire formats, and never touches host paths: an id is all a model chooses.
"""

from corral._public import publish as _publish
from corral.sources._ingest import Ingested, SourceFormat, detect_format, ingest
from corral.sources._limits import DEFAULT_SOURCE_LIMITS, SourceLimits
from corral.sources._registry import SourceRegistry
from corral.sources._source import Source, SourceInfo, SourceKind

__all__ = [
    "DEFAULT_SOURCE_LIMITS",
    "Ingested",
    "Source",
    "SourceFormat",
    "SourceInfo",
    "SourceKind",
    "SourceLimits",
    "SourceRegistry",
    "detect_format",
    "ingest",
]


_publish(globals())
