"""The client against a real ``runner sandbox serve --stdio`` on landlock: requests in
flight together, bytes both ways, typed errors naming their path, timeouts and
cancellation killing whole process trees, and a sandbox that leaves nothing running
when its client closes it, goes away, or runner is told to stop."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import time
from pathlib import Path

import pytest

from runner_sandbox import (
    FileTooLargeError,
    Sandbox,
    SandboxStartError,
    UserUnsupportedError,
    runner_bin,
)


def running_with(marker: str) -> list[int]:
    """Host processes whose command line holds ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


async def appears(marker: str, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if running_with(marker):
            return True
        await asyncio.sleep(0.05)
    return False


async def gone(marker: str, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not running_with(marker):
            return True
        await asyncio.sleep(0.1)
    return False


@pytest.fixture
async def sb(tmp_path: Path):
    box = await Sandbox.start(root=tmp_path, backend="landlock")
    try:
        yield box
    finally:
        await box.close()


async def test_ready_names_the_wall(sb: Sandbox, tmp_path: Path) -> None:
    assert sb.ready.backend == "landlock"
    assert sb.ready.workdir == str(tmp_path.resolve())
    assert not sb.ready.users
    assert "landlock" in sb.ready.wall


async def test_argv_is_not_a_shell_and_streams_stay_apart(sb: Sandbox) -> None:
    nasty = "$(echo injected) `id` ; exit 9 'x' \"y\""
    r = await sb.exec(["printf", "%s", nasty])
    assert (r.returncode, r.stdout) == (0, nasty.encode())
    r = await sb.exec(["sh", "-c", "echo out; echo err >&2; exit 7"])
    assert (r.code, r.stdout, r.stderr) == (7, b"out\n", b"err\n")
    r = await sb.exec(["sh", "-c", "kill -TERM $$"])
    assert (r.code, r.signal, r.returncode) == (None, 15, 143)


async def test_input_env_cwd_and_binary_bytes(sb: Sandbox, tmp_path: Path) -> None:
    payload = bytes(range(256)) * 3
    r = await sb.exec(["sh", "-c", "cat > in.bin; wc -c < in.bin"], input=payload)
    assert r.stdout.strip() == b"768"
    assert (tmp_path / "in.bin").read_bytes() == payload
    r = await sb.exec(["sh", "-c", 'echo "$A|$B"'], env={"A": "1 2", "B": "$(x)"})
    assert r.stdout == b"1 2|$(x)\n"
    (tmp_path / "sub").mkdir()
    r = await sb.exec(["pwd"], cwd="sub")
    assert r.stdout.decode().strip() == str(tmp_path.resolve() / "sub")
    # The host's variables stay on the host.
    os.environ["RUNNER_TEST_SECRET_VALUE"] = "hunter2"
    r = await sb.exec(["env"])
    assert b"hunter2" not in r.stdout


async def test_requests_in_flight_together(sb: Sandbox) -> None:
    started = time.monotonic()
    results = await asyncio.gather(
        *(sb.exec(["sh", "-c", f"sleep 1; echo {i}"]) for i in range(4)),
        sb.write_file("side.txt", "meanwhile"),
    )
    elapsed = time.monotonic() - started
    assert [r.stdout for r in results[:4]] == [f"{i}\n".encode() for i in range(4)]
    assert elapsed < 3.5, f"four 1 s commands took {elapsed:.1f} s: they ran one by one"
    assert await sb.read_file("side.txt") == b"meanwhile"


async def test_files_round_trip_large_and_typed_errors_name_the_path(
    sb: Sandbox, tmp_path: Path
) -> None:
    big = os.urandom(3 << 20) + b"\xc3\x28"
    await sb.write_file("deep/er/big.bin", big)
    assert (tmp_path / "deep/er/big.bin").read_bytes() == big
    assert await sb.read_file("deep/er/big.bin") == big
    await sb.write_file("empty", b"")
    assert await sb.read_file("empty") == b""
    with pytest.raises(FileNotFoundError) as e:
        await sb.read_file("no such file")
    assert e.value.filename == "no such file"
    with pytest.raises(IsADirectoryError):
        await sb.read_file("deep")
    with pytest.raises(IsADirectoryError):
        await sb.write_file("deep", b"x")
    (tmp_path / "locked").write_text("x")
    (tmp_path / "locked").chmod(0)
    with pytest.raises(PermissionError) as denied:
        await sb.read_file("locked")
    assert denied.value.filename == "locked"
    with pytest.raises(FileTooLargeError):
        await sb.read_file("deep/er/big.bin", max_bytes=1024)
    # Outside the wall is not found, whatever is there on the host.
    with pytest.raises((FileNotFoundError, PermissionError)):
        await sb.read_file("/root/.bash_history")


async def test_a_failed_write_leaves_the_old_file(sb: Sandbox, tmp_path: Path) -> None:
    await sb.write_file("keep.txt", "old")
    (tmp_path / "ro").mkdir()
    await sb.write_file("ro/f", "x")
    (tmp_path / "ro").chmod(0o555)
    with pytest.raises(PermissionError):
        await sb.write_file("ro/f", "new")
    assert (tmp_path / "ro/f").read_text() == "x"
    assert [p.name for p in (tmp_path / "ro").iterdir()] == ["f"], "no temporary left"
    assert (tmp_path / "keep.txt").read_text() == "old"


async def test_timeout_and_cancel_kill_the_whole_tree(sb: Sandbox) -> None:
    marker = "runner-py-" + secrets.token_hex(6)
    r = await sb.exec(
        ["sh", "-c", f"sleep 300 # {marker}-child & sleep 300 # {marker}-parent; :"],
        timeout=1,
    )
    assert r.timed_out
    assert await gone(marker), f"left running after the timeout: {running_with(marker)}"
    task = asyncio.ensure_future(sb.exec(["sh", "-c", f"sleep 300 # {marker}-c; :"]))
    assert await appears(marker)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(marker), "a cancelled exec kept running"


async def test_output_past_the_limit_is_counted(sb: Sandbox) -> None:
    r = await sb.exec(["sh", "-c", "head -c 300000 /dev/zero"], output_limit=100000)
    assert r.dropped_bytes > 0
    assert len(r.stdout) <= 100000


async def test_a_user_is_refused_on_landlock(sb: Sandbox) -> None:
    with pytest.raises(UserUnsupportedError):
        await sb.exec(["id"], user="nobody")


async def test_bad_lines_get_errors_and_the_session_goes_on(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        runner_bin(), "sandbox", "serve", "--stdio", "--root", str(tmp_path),
        "--sandbox", "landlock",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin and proc.stdout
    ready = json.loads(await proc.stdout.readline())
    assert ready["result"]["ready"]["protocol"] == 1
    proc.stdin.write(b"not json\n")
    proc.stdin.write(b'{"id": 5, "op": "format_disk"}\n')
    proc.stdin.write(b'{"id": 6, "op": "exec", "argv": []}\n')
    proc.stdin.write(b'{"id": 7, "op": "exec", "argv": ["echo", "alive"]}\n')
    await proc.stdin.drain()
    answers = {}
    for _ in range(4):
        line = json.loads(await proc.stdout.readline())
        answers[line["id"]] = line
    assert answers[0]["error"]["kind"] == "invalid_request"
    assert answers[5]["error"]["kind"] == "invalid_request"
    assert answers[6]["error"]["kind"] == "invalid_request"
    assert answers[7]["ok"] and answers[7]["result"]["stdout"] == "YWxpdmUK"
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 30) == 0


async def test_closing_stdin_or_sigterm_ends_everything(tmp_path: Path) -> None:
    for how in ("close", "sigterm", "client gone"):
        # A process that left the command's session survives the command (a server the
        # task started): only the end of the sandbox ends it. Its unique argument marks it.
        marker = f"3000.{secrets.randbelow(10**9):09d}"
        sb = await Sandbox.start(root=tmp_path, backend="landlock")
        await sb.exec(["sh", "-c", f"setsid sleep {marker} >/dev/null 2>&1 & sleep 0.5"])
        assert await appears(marker), how
        if how == "close":
            await sb.close()
        elif how == "sigterm":
            os.kill(sb.pid, signal.SIGTERM)
            assert await asyncio.wait_for(sb._process.wait(), 30) == 0
            await sb.close()
        else:
            sb._process.kill()  # runner itself killed: its children must still go
            await sb.close()
        assert await gone(marker), f"{how}: left running {running_with(marker)}"


async def test_a_sandbox_that_cannot_open_says_why(tmp_path: Path) -> None:
    with pytest.raises(SandboxStartError) as e:
        await Sandbox.start(root=tmp_path, profile=str(tmp_path / "missing.toml"))
    assert "missing.toml" in str(e.value)
