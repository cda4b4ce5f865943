"""The asyncio client of ``runner sandbox serve --stdio``.

One ``Sandbox`` is one runner process and one wall. Every request is a JSON line with an
id; answers come back by id, so any number of ``exec``, ``read_file`` and ``write_file``
calls may be in flight at once (the harnesses run tools concurrently). Nothing of the
wall is here: this module only speaks the protocol (docs/PYTHON.md).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import (
    RunnerNotFoundError,
    SandboxClosedError,
    SandboxStartError,
    from_wire,
)

#: The protocol version this client speaks.
PROTOCOL = 1

#: Bytes of file data per line when writing (runner reads a line at a time).
CHUNK = 1 << 20

#: The longest line either side may send: a command's whole output in base64.
_LINE_LIMIT = 1 << 28

#: How long ``close`` waits for runner to end the sandbox before it sends SIGTERM, and
#: then SIGKILL.
_CLOSE_GRACE = 30.0


def runner_bin() -> str:
    """The runner executable: ``RUNNER_BIN``, else ``runner`` on ``PATH``."""
    given = os.environ.get("RUNNER_BIN")
    if given:
        if not os.access(given, os.X_OK):
            raise RunnerNotFoundError(
                "not_found", f"RUNNER_BIN={given} is not an executable file", given
            )
        return given
    found = shutil.which("runner")
    if found is None:
        raise RunnerNotFoundError(
            "not_found",
            "no runner on PATH: install it (cargo install --path . in runner's "
            "checkout) or set RUNNER_BIN to its path",
        )
    return found


@dataclass(frozen=True)
class Ready:
    """What runner says about the sandbox once it is up."""

    backend: str
    workdir: str
    users: bool
    wall: str


@dataclass(frozen=True)
class ExecResult:
    """How a program ended, with its two output streams as bytes."""

    code: int | None
    signal: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    cancelled: bool
    dropped_bytes: int

    @property
    def returncode(self) -> int:
        """The shell's convention: the exit status, or 128 + N after signal N."""
        if self.code is not None:
            return self.code
        return 128 + (self.signal or 0)


@dataclass
class _Pending:
    future: asyncio.Future[Any]
    chunks: list[bytes]


class Sandbox:
    """One runner sandbox. Start it with ``await Sandbox.start(...)`` (or ``async with``);
    ``close`` ends it and everything running in it."""

    def __init__(self, process: asyncio.subprocess.Process, ready: Ready) -> None:
        self._process = process
        self.ready = ready
        self._next_id = 1
        self._pending: dict[int, _Pending] = {}
        self._write_lock = asyncio.Lock()
        self._stderr = bytearray()
        self._closed = False
        self._reader = asyncio.ensure_future(self._read_answers())
        self._stderr_reader = asyncio.ensure_future(self._read_stderr())

    @classmethod
    async def start(
        cls,
        *,
        root: str | os.PathLike[str] | None = None,
        backend: str | None = None,
        image: str | None = None,
        network: str | None = None,
        profile: str | os.PathLike[str] | None = None,
        config: str | os.PathLike[str] | None = None,
        audit: str | os.PathLike[str] | None = None,
        task_image: str | None = None,
        build: str | os.PathLike[str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        extra_args: Sequence[str] = (),
        runner: str | None = None,
    ) -> Sandbox:
        """Starts ``runner sandbox serve --stdio`` with these flags (each is the flag of
        the same name; see ``runner sandbox serve --help``) and waits until the sandbox
        is up. Raises ``SandboxStartError`` with runner's reason when it does not open."""
        args = [runner or runner_bin(), "sandbox", "serve", "--stdio"]
        flags: list[tuple[str, Any]] = [
            ("--root", root),
            ("--sandbox", backend),
            ("--image", image),
            ("--network", network),
            ("--profile", profile),
            ("--config", config),
            ("--audit", audit),
            ("--task-image", task_image),
            ("--build", build),
            ("--workdir", workdir),
            ("--user", user),
        ]
        for flag, value in flags:
            if value is not None:
                args += [flag, os.fspath(value)]
        args += list(extra_args)
        process = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=_LINE_LIMIT,
            start_new_session=True,
        )
        assert process.stdout is not None and process.stderr is not None
        first = await process.stdout.readline()
        if not first:
            said = (await process.stderr.read()).decode("utf-8", "replace").strip()
            await process.wait()
            raise SandboxStartError(
                "start",
                f"runner could not open the sandbox (status {process.returncode}): "
                f"{said or 'it said nothing'}",
            )
        ready = json.loads(first)["result"]["ready"]
        if ready.get("protocol") != PROTOCOL:
            process.kill()
            await process.wait()
            raise SandboxStartError(
                "start",
                f"runner speaks protocol {ready.get('protocol')}, this client "
                f"{PROTOCOL}: install the python package from the same checkout",
            )
        return cls(
            process,
            Ready(
                backend=ready["backend"],
                workdir=ready["workdir"],
                users=bool(ready["users"]),
                wall=ready["wall"],
            ),
        )

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def pid(self) -> int:
        """The runner process's id."""
        return self._process.pid

    async def exec(
        self,
        argv: Sequence[str],
        *,
        input: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        timeout: float | None = None,
        output_limit: int | None = None,
    ) -> ExecResult:
        """Runs ``argv`` (no shell) to its end. A ``timeout`` kills the program and every
        process it started; the result then has ``timed_out`` set. Cancelling the call
        kills them too."""
        request: dict[str, Any] = {"op": "exec", "argv": list(argv)}
        if input is not None:
            data = input.encode("utf-8") if isinstance(input, str) else input
            request["input"] = base64.b64encode(data).decode("ascii")
        if env:
            request["env"] = dict(env)
        for key, value in (
            ("cwd", cwd),
            ("user", user),
            ("timeout", timeout),
            ("output_limit", output_limit),
        ):
            if value is not None:
                request[key] = value
        id, pending = await self._send(request)
        try:
            result = await pending.future
        except asyncio.CancelledError:
            if not self._closed:
                await self._send({"op": "cancel", "target": id})
            raise
        return ExecResult(
            code=result["code"],
            signal=result["signal"],
            stdout=base64.b64decode(result["stdout"]),
            stderr=base64.b64decode(result["stderr"]),
            timed_out=bool(result["timed_out"]),
            cancelled=bool(result["cancelled"]),
            dropped_bytes=int(result["dropped_bytes"]),
        )

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """A file's bytes (relative paths are the sandbox's working directory's). Raises
        ``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError`` naming the path,
        or ``FileTooLargeError`` past ``max_bytes``."""
        request: dict[str, Any] = {"op": "read_file", "path": path}
        if max_bytes is not None:
            request["max_bytes"] = max_bytes
        _, pending = await self._send(request)
        await pending.future
        return b"".join(pending.chunks)

    async def write_file(self, path: str, data: bytes | str) -> None:
        """Writes a file, making its folders; it appears whole or not at all."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        pieces = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""]
        id = self._take_id()
        pending = self._expect(id)
        async with self._write_lock:
            for n, piece in enumerate(pieces):
                line: dict[str, Any] = {
                    "id": id,
                    "op": "write_file" if n == 0 else "write_chunk",
                    "data": base64.b64encode(piece).decode("ascii"),
                    "more": n + 1 < len(pieces),
                }
                if n == 0:
                    line["path"] = path
                await self._write_line(line)
        await pending.future

    async def close(self) -> None:
        """Ends the sandbox: runner kills everything in it and removes what it made.
        Waits for that; past a grace period runner is terminated, then killed."""
        if self._closed:
            return
        self._closed = True
        stdin = self._process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        try:
            await asyncio.wait_for(self._process.wait(), _CLOSE_GRACE)
        except asyncio.TimeoutError:
            self._signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._process.wait(), 10)
            except asyncio.TimeoutError:
                self._signal(signal.SIGKILL)
                await self._process.wait()
        await self._reader
        await self._stderr_reader

    def _signal(self, sig: int) -> None:
        try:
            self._process.send_signal(sig)
        except ProcessLookupError:
            pass

    def _take_id(self) -> int:
        id = self._next_id
        self._next_id += 1
        return id

    def _expect(self, id: int) -> _Pending:
        if self._closed or self._reader.done():
            raise SandboxClosedError("closed", self._gone())
        pending = _Pending(asyncio.get_running_loop().create_future(), [])
        self._pending[id] = pending
        return pending

    async def _send(self, request: dict[str, Any]) -> tuple[int, _Pending]:
        id = self._take_id()
        pending = self._expect(id)
        async with self._write_lock:
            await self._write_line({"id": id, **request})
        return id, pending

    async def _write_line(self, line: dict[str, Any]) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(line).encode("utf-8") + b"\n")
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as e:
            raise SandboxClosedError("closed", self._gone()) from e

    async def _read_answers(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        while True:
            line = await stdout.readline()
            if not line:
                break
            message = json.loads(line)
            pending = self._pending.get(message.get("id"))
            if pending is None:
                continue
            if "chunk" in message:
                pending.chunks.append(base64.b64decode(message["chunk"]))
                continue
            del self._pending[message["id"]]
            if pending.future.done():
                continue
            if message.get("ok"):
                pending.future.set_result(message.get("result"))
            else:
                pending.future.set_exception(from_wire(message.get("error", {})))
        # Runner is gone: whatever still waits will never be answered.
        await self._process.wait()
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_exception(SandboxClosedError("closed", self._gone()))
        self._pending.clear()

    async def _read_stderr(self) -> None:
        stderr = self._process.stderr
        assert stderr is not None
        while True:
            data = await stderr.read(65536)
            if not data:
                return
            self._stderr += data
            # The last words are what explain an end: keep the tail.
            del self._stderr[: max(0, len(self._stderr) - 65536)]

    def _gone(self) -> str:
        said = self._stderr.decode("utf-8", "replace").strip()
        return (
            f"the runner process ended (status {self._process.returncode})"
            + (f": {said}" if said else "")
        )
