"""The failures runner reports, as Python exceptions.

A failure about a file becomes the built-in exception Python code already catches
(``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError``, ``NotADirectoryError``),
carrying the path; the rest are ``RunnerError`` subclasses with runner's own kind.
"""

from __future__ import annotations

import errno
from typing import Any


class RunnerError(Exception):
    """A request runner could not carry out; ``kind`` is runner's name for why."""

    def __init__(self, kind: str, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.path = path


class RunnerNotFoundError(RunnerError):
    """No runner executable: neither ``RUNNER_BIN`` nor ``runner`` on ``PATH``."""


class SandboxStartError(RunnerError):
    """The sandbox did not open (a broken profile, no wall on this machine, no image)."""


class SandboxClosedError(RunnerError):
    """The runner process ended while requests were still waiting for it."""


class FileTooLargeError(RunnerError):
    """A file over the read's ``max_bytes``."""


class UserUnsupportedError(RunnerError):
    """The wall runs every command as one user and cannot switch to the one asked for."""


class SandboxFailedError(RunnerError):
    """The sandbox itself failed (its server died, the engine went away)."""


_FILE_ERRORS: dict[str, tuple[type[OSError], int]] = {
    "not_found": (FileNotFoundError, errno.ENOENT),
    "permission_denied": (PermissionError, errno.EACCES),
    "is_a_directory": (IsADirectoryError, errno.EISDIR),
    "not_a_directory": (NotADirectoryError, errno.ENOTDIR),
}

_RUNNER_ERRORS: dict[str, type[RunnerError]] = {
    "too_large": FileTooLargeError,
    "user_unsupported": UserUnsupportedError,
    "sandbox": SandboxFailedError,
}


def from_wire(error: dict[str, Any]) -> Exception:
    """The exception for one ``error`` object of the protocol."""
    kind = str(error.get("kind", "io"))
    message = str(error.get("message", "runner failed without saying why"))
    path = error.get("path")
    if kind in _FILE_ERRORS:
        cls, code = _FILE_ERRORS[kind]
        if path is not None:
            return cls(code, message, path)
        return cls(code, message)
    return _RUNNER_ERRORS.get(kind, RunnerError)(kind, message, path)
