"""Invocation-local sources: attachments ingested to canonical text, under opaque ids.

Above: tools and front ends, which register attachments and ``read_source`` texts and pass
the ids a call names to :meth:`SourceRegistry.resolve`. Below: corral.engine, whose
:class:`~corral.engine.Input` :meth:`SourceRegistry.to_input` produces. Knows no tool
schemas, quotas or wire formats, and never touches host paths: an id is all a model chooses.
"""

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

# Tracebacks and reprs name the public path, not the private module.
for _name in ("Ingested", "Source", "SourceInfo", "SourceLimits", "SourceRegistry"):
    globals()[_name].__module__ = __name__
detect_format.__module__ = ingest.__module__ = __name__
del _name
