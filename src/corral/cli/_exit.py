"""The exit codes every ``corral`` subcommand shares (the README's command table)."""

from __future__ import annotations

__all__ = ["EXIT_INVALID", "EXIT_OK", "EXIT_OTHER", "EXIT_PYTHON_ERROR"]

EXIT_OK = 0
EXIT_PYTHON_ERROR = 1
"""The code raised (outcome ``python_error``); for a tool call, the tool's result is an error."""
EXIT_INVALID = 2
"""Invalid input, or a failure to start (a bad flag, file or configuration)."""
EXIT_OTHER = 3
"""Any other outcome or failure (a timeout, a failed doctor check, a corral error)."""
