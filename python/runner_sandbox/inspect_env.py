"""runner as an inspect_ai sandbox: ``sandbox="runner"`` or ``sandbox=("runner", CONFIG)``.

inspect_ai finds this module through its ``inspect_ai`` entry point (pyproject.toml), so a
task names the sandbox and never imports this package. Each sample gets a wall of its own:

- no config (the wall runner picks for the machine: landlock where the kernel enforces
  it, else docker), or a runner profile TOML whose ``[sandbox] backend`` is ``landlock``:
  a fresh, empty worktree per sample, removed at the sample's end;
- a profile whose backend is ``docker`` with an ``image``: a container of that image per
  sample, its own file system the worktree, its root able to run commands as other users
  (inspect's ``user=``);
- a ``Dockerfile`` (or a folder holding one): the image built by runner's engine once,
  then a container of it per sample.

The profile is handed to runner as ``--profile``: its ``[permission]`` rules, network and
limits are runner's to enforce, never this module's.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal, Union, overload

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - inspect_ai needs 3.10, tomllib came in 3.11
    tomllib = None

from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUserUnsupportedError,
    sandboxenv,
)

from .client import Sandbox
from .errors import FileTooLargeError, UserUnsupportedError


def _wall_of(config: SandboxEnvironmentConfigType | None) -> dict[str, Any]:
    """The flags of ``runner sandbox serve`` a task's sandbox config asks for."""
    if config is None:
        return {}
    if not isinstance(config, str):
        raise ValueError(
            f"the runner sandbox takes a path (a runner profile TOML or a Dockerfile), "
            f"not {type(config).__name__}"
        )
    path = Path(config).resolve()
    if path.is_dir() and (path / "Dockerfile").is_file():
        return {"build": str(path)}
    if path.name == "Dockerfile" or path.suffix.lower() == ".dockerfile":
        return {"build": str(path.parent)}
    if not path.is_file():
        raise FileNotFoundError(f"the runner sandbox config {config} does not exist")
    if tomllib is None:
        raise RuntimeError("reading a runner profile needs Python 3.11 or newer")
    with open(path, "rb") as f:
        sandbox = tomllib.load(f).get("sandbox", {})
    wall: dict[str, Any] = {"profile": str(path)}
    if sandbox.get("backend") == "docker" and sandbox.get("image"):
        wall["task_image"] = sandbox["image"]
    return wall


@sandboxenv(name="runner")
class RunnerSandboxEnvironment(SandboxEnvironment):
    """One sample's runner sandbox."""

    def __init__(self, sandbox: Sandbox, worktree: str | None) -> None:
        super().__init__()
        self.sandbox = sandbox
        self._worktree = worktree

    @classmethod
    def config_files(cls) -> list[str]:
        return ["runner.toml"]

    @classmethod
    def default_concurrency(cls) -> int | None:
        # Each sample holds a runner process and a wall; past the cores, more only wait.
        return max(2, (os.cpu_count() or 2) * 2)

    @classmethod
    async def task_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None
    ) -> None:
        # A broken config fails the task at its start, not once per sample.
        _wall_of(config)

    @classmethod
    async def sample_init(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        metadata: dict[str, str],
    ) -> dict[str, SandboxEnvironment]:
        wall = _wall_of(config)
        worktree = None
        if "task_image" not in wall and "build" not in wall:
            worktree = tempfile.mkdtemp(prefix="runner-inspect-")
            wall["root"] = worktree
        try:
            sandbox = await Sandbox.start(**wall)
        except BaseException:
            if worktree is not None:
                shutil.rmtree(worktree, ignore_errors=True)
            raise
        return {"default": cls(sandbox, worktree)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            env = environment.as_type(RunnerSandboxEnvironment)
            try:
                await env.sandbox.close()
            finally:
                if env._worktree is not None:
                    shutil.rmtree(env._worktree, ignore_errors=True)

    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool
    ) -> None:
        # Every sample's wall ended with its sample; runner leaves nothing behind.
        pass

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        try:
            result = await self.sandbox.exec(
                cmd,
                input=input,
                env=env,
                cwd=cwd,
                user=user,
                timeout=timeout,
                output_limit=2 * limit,
            )
        except UserUnsupportedError as e:
            raise SandboxUserUnsupportedError(str(e)) from e
        stdout = result.stdout.decode("utf-8", "replace")
        stderr = result.stderr.decode("utf-8", "replace")
        if result.timed_out:
            raise TimeoutError(
                f"{cmd[0] if cmd else 'the command'} timed out after {timeout} seconds; "
                "runner killed it and every process it started"
            )
        if result.dropped_bytes > 0:
            raise OutputLimitExceededError(
                limit_str=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR,
                truncated_output=stdout,
            )
        code = result.returncode
        if code == 126 and "permission denied" in stderr.casefold():
            raise PermissionError(f"cannot execute {cmd[0]}: {stderr.strip()}")
        return ExecResult(success=code == 0, returncode=code, stdout=stdout, stderr=stderr)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        await self.sandbox.write_file(file, contents)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str, bytes]:
        try:
            data = await self.sandbox.read_file(
                file, max_bytes=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
            )
        except FileTooLargeError as e:
            raise OutputLimitExceededError(
                limit_str=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR,
                truncated_output=None,
            ) from e
        return data.decode("utf-8") if text else data
