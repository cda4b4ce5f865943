"""runner's sandbox for Python harnesses.

``Sandbox`` is an asyncio client of ``runner sandbox serve --stdio``: one runner process,
one wall (landlock, a hardened container, a task image's container), with runner's
allow-list proxy and audit trail. The inspect_ai plug-in is ``runner_sandbox.inspect_env``
(``sandbox="runner"``); the wire protocol is described in runner's docs/PYTHON.md.
"""

from .client import PROTOCOL, ExecResult, Ready, Sandbox, runner_bin
from .errors import (
    FileTooLargeError,
    RunnerError,
    RunnerNotFoundError,
    SandboxClosedError,
    SandboxFailedError,
    SandboxStartError,
    UserUnsupportedError,
)

__all__ = [
    "PROTOCOL",
    "ExecResult",
    "FileTooLargeError",
    "Ready",
    "RunnerError",
    "RunnerNotFoundError",
    "Sandbox",
    "SandboxClosedError",
    "SandboxFailedError",
    "SandboxStartError",
    "UserUnsupportedError",
    "runner_bin",
]
