"""The E2B API on corral: the unmodified E2B SDK drives corral's sandboxes.

``E2BGateway`` wraps corral's ASGI app and serves, on the same port, E2B's control plane
(``/sandboxes``, ``/v2/sandboxes``), envd (files, ``filesystem.Filesystem``,
``process.Process``) and the code interpreter (``/execute``, ``/contexts``), routed by the
``E2b-Sandbox-Id``/``E2b-Sandbox-Port`` headers or a ``<port>-<id>.<domain>`` host name. An
E2B sandbox is a corral session owned by the key that created it. Specified by
``docs/e2b.md``; the SDK itself is the contract.

Above: ``corral.http``, which mounts it in gateway mode. Below: ``corral.engine``.
"""

from corral._public import publish as _publish
from corral.e2b._gateway import E2BGateway
from corral.e2b._keys import is_e2b_key, new_e2b_key
from corral.e2b._service import ENVD_VERSION, E2BService

__all__ = ["ENVD_VERSION", "E2BGateway", "E2BService", "is_e2b_key", "new_e2b_key"]

_publish(globals())
