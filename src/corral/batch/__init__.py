"""Batch evaluation: one fresh isolated run per item, records in input order, here or on Ray.

Above: the CLI (``corral batch``) and Python callers (evaluations, RL reward pipelines). Below:
``corral.engine``'s public API; Ray only when ``ray_address`` is given (the ``corral[ray]``
extra). Not HTTP-aware, and knows nothing of files: callers bring items and take records.
"""

from corral._public import publish as _publish
from corral.batch._items import BatchItem, Record, Unreadable, read_jsonl
from corral.batch._run import run_batch

__all__ = ["BatchItem", "Record", "Unreadable", "read_jsonl", "run_batch"]

_publish(globals())
