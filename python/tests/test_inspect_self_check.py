"""inspect_ai's own conformance suite for sandbox providers, on runner's landlock wall and
on a docker task image. Every check runs and every check passes, but one on landlock:
running a command as another user, which landlock cannot do (it confines the caller's own
processes; docs/PYTHON.md says so). That one is expected to fail, and an unexpected pass
fails the run (``strict``), so the list cannot go stale. The checks that write to absolute
``/tmp`` paths pass on landlock because its sandbox has a ``/tmp`` of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from inspect_ai.util._sandbox.registry import registry_find_sandboxenv
from inspect_ai.util._sandbox.self_check import *  # noqa: F403

from conftest import IMAGE

#: What landlock cannot do, and why.
LANDLOCK_CANNOT = {
    "test_exec_as_user": "landlock confines the caller's own processes: no other user",
}


@pytest.fixture(params=["landlock", "docker"])
async def sandbox_env(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[object]:
    wall = request.param
    if wall == "landlock":
        reason = LANDLOCK_CANNOT.get(request.node.originalname)
        if reason:
            request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
        config = tmp_path / "runner.toml"
        config.write_text('[sandbox]\nbackend = "landlock"\n')
    else:
        config = tmp_path / "runner.toml"
        config.write_text(f'[sandbox]\nbackend = "docker"\nimage = "{IMAGE}"\n')
    # Found by name through inspect's registry (the entry point), not imported.
    env_type = registry_find_sandboxenv("runner")
    await env_type.task_init("self_check", str(config))
    envs = await env_type.sample_init("self_check", str(config), {})
    try:
        yield envs["default"]
    finally:
        await env_type.sample_cleanup("self_check", str(config), envs, False)
        await env_type.task_cleanup("self_check", str(config), True)
