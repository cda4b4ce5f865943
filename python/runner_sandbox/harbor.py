"""Harbor's trials in runner's wall.

``harbor run -p TASKS --agent oracle --env runner_sandbox.harbor:RunnerEnvironment``
runs each trial's container through runner: the task's ``environment/Dockerfile`` built
by runner's engine, the container hardened as ``runner eval`` makes it (no capabilities
beyond those a system's own files need, no new privileges, no network of its own, the
task's CPUs and memory as hard limits, gVisor or Podman through runner's own settings),
every connection judged by runner's allow-list proxy under the phase's ``network_mode``,
and each trial's decisions in ``runner-audit.jsonl`` beside its logs.

This module only translates: Harbor's ``BaseEnvironment`` calls become requests to one
``runner eval environment`` process per trial (JSON lines over its stdin and stdout).
Nothing here decides what a command may do; if this process dies, runner sees its input
close and removes the container.

Options (``--ek NAME=VALUE``): ``profile`` (runner's profile for the wall, default
``eval``; ``untrusted`` runs under gVisor where the engine has it), ``runtime`` (an OCI
runtime such as ``runsc``), ``docker_host`` (another engine, e.g. Podman's socket),
``config`` (runner's config file: its CA bundle), ``audit`` (``false`` for no trail).
The runner binary is ``RUNNER_BIN``, else ``runner`` on ``PATH``.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

from harbor.environments.base import (
    BaseEnvironment,
    ExecResult,
    SandboxBuildFailedError,
)
from harbor.environments.capabilities import (
    EnvironmentCapabilities,
    EnvironmentResourceCapabilities,
)
from harbor.environments.definition import should_use_prebuilt_docker_image
from harbor.models.task.config import NetworkPolicy
from harbor.models.trial.config import ResourceMode
from harbor.models.trial.paths import EnvironmentPaths

from .client import runner_bin
from .errors import RunnerError, SandboxClosedError, SandboxStartError, from_wire

__all__ = ["RunnerEnvironment"]

COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml")
AUDIT_FILE = "runner-audit.jsonl"
ABOUT_FILE = "runner-environment.json"


class _Wire:
    """One ``runner eval environment`` process: requests out, answers matched by id."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self._next = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def spawn(cls, argv: list[str]) -> "_Wire":
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=1 << 30,
        )
        return cls(process)

    @property
    def pid(self) -> int:
        return self._process.pid

    async def _read(self) -> None:
        assert self._process.stdout is not None
        while True:
            line = await self._process.stdout.readline()
            if not line:
                break
            answer = json.loads(line)
            waiting = self._waiting.pop(answer.get("id"), None)
            if waiting is not None and not waiting.done():
                waiting.set_result(answer)
        stderr = b""
        if self._process.stderr is not None:
            stderr = await self._process.stderr.read()
        gone = SandboxClosedError(
            "sandbox",
            "runner eval environment ended: "
            + (stderr.decode(errors="replace").strip() or "no message"),
        )
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_exception(gone)
        self._waiting.clear()

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        future: asyncio.Future[dict[str, Any]] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiting[ident] = future
        stdin = self._process.stdin
        if stdin is None or self._reader.done():
            raise SandboxClosedError("sandbox", "runner eval environment is gone")
        stdin.write((json.dumps({"id": ident, "op": op, **fields}) + "\n").encode())
        await stdin.drain()
        answer = await future
        if not answer.get("ok"):
            raise from_wire(answer.get("error") or {})
        return dict(answer.get("result") or {})

    async def close(self) -> None:
        """Closes runner's input (it removes the container) and waits for it to exit."""
        if self._process.stdin is not None and not self._process.stdin.is_closing():
            self._process.stdin.close()
        try:
            await asyncio.wait_for(self._process.wait(), timeout=120)
        except TimeoutError:
            self._process.kill()
            await self._process.wait()
        await self._reader


def _tar_of_dir(source: Path) -> bytes:
    """The folder's contents (not the folder itself), owned by root as ``docker cp``
    leaves what it copies."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(source.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(source)))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isreg():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _tar_of_file(source: Path, name: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tar.gettarinfo(str(source), arcname=name)
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        with source.open("rb") as handle:
            tar.addfile(info, handle)
    return buffer.getvalue()


def _strip_first(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """The engine's tar of a folder holds the folder's own name first: dropped, so the
    contents land in the target; special files carry nothing and are skipped."""
    parts = PurePosixPath(member.name).parts
    if len(parts) <= 1 or member.isdev():
        return None
    member = member.replace(name=str(PurePosixPath(*parts[1:])), deep=False)
    return tarfile.data_filter(member, dest)


class RunnerEnvironment(BaseEnvironment):
    """A Harbor environment whose container is runner's task container."""

    def __init__(
        self,
        *args: Any,
        profile: str | None = None,
        runtime: str | None = None,
        docker_host: str | None = None,
        config: str | None = None,
        audit: bool | str = True,
        **kwargs: Any,
    ) -> None:
        self._profile = profile
        self._runtime = runtime
        self._docker_host = docker_host
        self._config = config
        self._audit = str(audit).lower() not in ("false", "0", "no", "off")
        self._wire: _Wire | None = None
        self._started: dict[str, Any] = {}
        super().__init__(*args, **kwargs)

    @staticmethod
    def type() -> str:
        return "runner"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # What runner's proxy enforces: no network, or exact host names and IPv4
        # addresses, switched between phases. Not wildcards or ranges (runner's task
        # reading refuses them), not GPUs, not compose, no host mounts.
        return EnvironmentCapabilities(
            disable_internet=True,
            network_allowlist=True,
            network_allowlist_hostnames=True,
            network_allowlist_ipv4_addresses=True,
            dynamic_network_policy=True,
        )

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        # The engine's cgroup limits: hard ceilings, fractions of a CPU allowed; no
        # reservations.
        return EnvironmentResourceCapabilities(
            cpu_limit=True, memory_limit=True, fractional_cpus=True
        )

    def _validate_definition(self) -> None:
        dockerfile = self.environment_dir / "Dockerfile"
        if not dockerfile.exists() and not self.task_env_config.docker_image:
            raise FileNotFoundError(
                f"{dockerfile} is not there and the task names no docker_image"
            )

    def _refuse_compose(self) -> None:
        # At the trial's start rather than in _validate_definition: Harbor builds every
        # trial's environment before any runs, and a refusal there ends the whole job.
        for name in COMPOSE_FILES:
            if (self.environment_dir / name).exists():
                raise ValueError(
                    f"{self.environment_dir / name}: this task is a docker compose "
                    "environment, and runner's environment runs a task's one container, "
                    "not docker compose services; run it with Harbor's docker or podman "
                    "environment"
                )

    async def start(self, force_build: bool) -> None:
        self._refuse_compose()
        prebuilt = should_use_prebuilt_docker_image(
            self.environment_dir,
            docker_image=self.task_env_config.docker_image,
            force_build=force_build,
        )
        request: dict[str, Any] = {
            "environment_dir": str(self.environment_dir.resolve()),
            "docker_image": self.task_env_config.docker_image if prebuilt else None,
            "force_build": not prebuilt,
            "build_timeout_sec": self.task_env_config.build_timeout_sec,
            "workdir": self.task_env_config.workdir,
            "cpus": self._resource_limit_value("cpu", auto_mode=ResourceMode.LIMIT),
            "memory_mb": self._resource_limit_value(
                "memory", auto_mode=ResourceMode.LIMIT
            ),
            "network": self._policy(self.network_policy),
            "profile": self._profile,
            "runtime": self._runtime,
            "docker_host": self._docker_host,
            "config": self._config,
        }
        if self._audit:
            request["audit"] = str(
                (self.trial_paths.trial_dir / AUDIT_FILE).resolve()
            )
        self._wire = await _Wire.spawn([runner_bin(), "eval", "environment"])
        try:
            self._started = await self._wire.call("start", **request)
        except RunnerError as e:
            await self._close()
            if e.kind == "build_failed":
                # Harbor's own kind for it: the task's definition, not worth a retry.
                raise SandboxBuildFailedError(str(e)) from e
            raise SandboxStartError(
                e.kind, f"runner could not start the trial's environment: {e}"
            ) from e
        except BaseException:
            await self._close()
            raise
        if self._started.get("build_log"):
            self.logger.debug(self._started["build_log"])
        self._write_about()
        await self._upload_environment_dir_after_start()
        paths = EnvironmentPaths.for_os(self.os)
        await self.ensure_dirs(
            [paths.agent_dir, paths.verifier_dir, paths.artifacts_dir]
        )

    def _write_about(self) -> None:
        """What ran this trial (runner's pid, the container, the image, the engine)
        beside its logs, written whole."""
        about = {k: v for k, v in self._started.items() if k != "build_log"}
        about["runner_pid"] = self._wire.pid if self._wire is not None else None
        path = self.trial_paths.trial_dir / ABOUT_FILE
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps(about, indent=2) + "\n")
        partial.replace(path)

    async def stop(self, delete: bool) -> None:
        wire, self._wire = self._wire, None
        if wire is None:
            return
        try:
            answer = await wire.call("stop")
            for line in answer.get("connections", []):
                self.logger.debug(f"runner proxy: {line}")
        except (RunnerError, OSError):
            pass
        finally:
            await wire.close()

    async def _close(self) -> None:
        wire, self._wire = self._wire, None
        if wire is not None:
            await wire.close()

    def _live(self) -> _Wire:
        if self._wire is None:
            raise SandboxClosedError("sandbox", "the environment is not started")
        return self._wire

    @staticmethod
    def _policy(policy: NetworkPolicy) -> dict[str, Any]:
        return {
            "network_mode": policy.network_mode.value,
            "allowed_hosts": list(policy.allowed_hosts),
        }

    async def _apply_network_policy(self, network_policy: NetworkPolicy) -> None:
        await self._live().call("network", **self._policy(network_policy))

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        user = self._resolve_user(user)
        answer = await self._live().call(
            "exec",
            command=command,
            cwd=cwd or self.task_env_config.workdir,
            env=self._merge_env(env) or {},
            timeout_sec=timeout_sec,
            user=None if user is None else str(user),
        )
        if answer.get("timed_out"):
            # As Harbor's docker environment says it.
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        stdout = base64.b64decode(answer.get("stdout", "")).decode(errors="replace")
        stderr = base64.b64decode(answer.get("stderr", "")).decode(errors="replace")
        code = answer.get("code")
        return ExecResult(
            stdout=stdout,
            stderr=stderr,
            return_code=code if code is not None else -1,
        )

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = PurePosixPath(target_path)
        tar = _tar_of_file(Path(source_path), target.name)
        await self._live().call(
            "upload", dir=str(target.parent), tar=base64.b64encode(tar).decode()
        )

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        tar = _tar_of_dir(Path(source_dir))
        await self._live().call(
            "upload", dir=target_dir, tar=base64.b64encode(tar).decode()
        )

    async def _download(self, path: str) -> tarfile.TarFile:
        answer = await self._live().call("download", path=path)
        return tarfile.open(fileobj=io.BytesIO(base64.b64decode(answer["tar"])))

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        with await self._download(source_path) as tar:
            member = next((m for m in tar.getmembers() if m.isfile()), None)
            if member is None:
                raise FileNotFoundError(f"{source_path} is not a file")
            data = tar.extractfile(member)
            assert data is not None
            target = Path(target_path)
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.partial")
            partial.write_bytes(data.read())
            partial.replace(target)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        target = Path(target_dir)
        target.mkdir(parents=True, exist_ok=True)
        with await self._download(source_dir) as tar:
            tar.extractall(path=target, filter=_strip_first)
