"""``RunnerEnvironment``'s calls one by one, as Harbor makes them, on a real container:
exec's streams, status, cwd, env, user and timeout; files and folders in and out, bytes
intact; and the container gone after ``stop``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harbor.environments.base import SandboxBuildFailedError
from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.paths import TrialPaths

from runner_sandbox.harbor import RunnerEnvironment

ENVIRONMENT = Path(__file__).parent / "fixtures" / "harbor" / "right" / "environment"


async def test_each_call_does_what_harbor_expects(tmp_path: Path) -> None:
    paths = TrialPaths(trial_dir=tmp_path / "trial")
    paths.mkdir()
    env = RunnerEnvironment(
        environment_dir=ENVIRONMENT,
        environment_name="right",
        session_id="right__calls__env",
        trial_paths=paths,
        task_env_config=EnvironmentConfig(),
    )
    await env.start(force_build=False)
    container = env._started["container"]
    try:
        ran = await env.exec("echo out; echo err >&2; exit 3")
        assert (ran.stdout, ran.stderr, ran.return_code) == ("out\n", "err\n", 3)
        assert (await env.exec("pwd")).stdout == "/app\n"
        assert (await env.exec("pwd", cwd="/tmp")).stdout == "/tmp\n"
        assert (await env.exec("echo $X", env={"X": "y z"})).stdout == "y z\n"
        assert (await env.exec("id -un", user="nobody")).stdout == "nobody\n"
        assert (await env.exec("id -un", user="root")).stdout == "root\n"
        # /logs as Harbor expects them, writable by any user.
        listed = await env.exec("stat -c '%a %n' /logs/agent /logs/verifier /logs/artifacts")
        assert listed.stdout.split("\n")[:3] == [
            "777 /logs/agent",
            "777 /logs/verifier",
            "777 /logs/artifacts",
        ]

        # A timeout is Harbor's docker error, and what the command started is gone.
        for user in (None, "nobody"):
            with pytest.raises(RuntimeError, match="timed out after 1 seconds"):
                await env.exec("sleep 300 & sleep 301", timeout_sec=1, user=user)
        left = await env.exec("ps -eo comm= | grep -c '^sleep' || true")
        assert left.stdout.strip() == "0", left

        source = tmp_path / "tree"
        (source / "deep" / "er").mkdir(parents=True)
        (source / "deep" / "er" / "blob.bin").write_bytes(bytes(range(256)) * 64)
        (source / "top.txt").write_text("top\n")
        await env.upload_dir(source, "/data/in")
        assert (await env.exec("cat /data/in/top.txt")).stdout == "top\n"
        back = tmp_path / "back"
        await env.download_dir("/data/in", back)
        assert (back / "deep" / "er" / "blob.bin").read_bytes() == bytes(range(256)) * 64
        assert (back / "top.txt").read_text() == "top\n"
        await env.upload_file(source / "top.txt", "/data/one/renamed.txt")
        await env.download_file("/data/one/renamed.txt", tmp_path / "one.txt")
        assert (tmp_path / "one.txt").read_text() == "top\n"
        with pytest.raises(FileNotFoundError):
            await env.download_file("/data/none", tmp_path / "none")
    finally:
        await env.stop(delete=True)
    listed = subprocess.run(
        ["docker", "ps", "-aq", "--no-trunc", "--filter", f"id={container}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout.strip() == ""


async def test_a_dockerfile_that_fails_is_harbors_build_failure(tmp_path: Path) -> None:
    environment = tmp_path / "environment"
    environment.mkdir()
    (environment / "Dockerfile").write_text(
        "FROM runner-sandbox:bookworm\nRUN echo about to fail && exit 7\n"
    )
    paths = TrialPaths(trial_dir=tmp_path / "trial")
    paths.mkdir()
    env = RunnerEnvironment(
        environment_dir=environment,
        environment_name="broken",
        session_id="broken__calls__env",
        trial_paths=paths,
        task_env_config=EnvironmentConfig(),
    )
    with pytest.raises(SandboxBuildFailedError, match="about to fail"):
        await env.start(force_build=True)
    await env.stop(delete=True)
