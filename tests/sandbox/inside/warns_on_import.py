"""A module that warns as it is imported (for the case server's pre-import tests)."""

import warnings

warnings.warn("imported a deprecated helper", DeprecationWarning, stacklevel=2)
