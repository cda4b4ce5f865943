"""inspect_ai's exec round trip: its ``local`` sandbox beside runner's plug-in (landlock)
and runner's client on its own, and one whole sample (start, one exec, end) through the
plug-in. Prints one JSON object of medians in milliseconds; run by
``cargo bench --bench inspect_exec``, which sets RUNNER_BIN and adds ``runner exec``."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

from inspect_ai.util._sandbox.registry import registry_find_sandboxenv

from runner_sandbox import Sandbox


async def median_ms(call: Callable[[], Awaitable[object]], rounds: int) -> float:
    for _ in range(5):  # warm: first calls pay for imports and caches
        await call()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def through_inspect(name: str, config: str | None, rounds: int) -> float:
    env_type = registry_find_sandboxenv(name)
    await env_type.task_init("bench", config)
    envs = await env_type.sample_init("bench", config, {})
    env = envs["default"]

    async def call() -> None:
        result = await env.exec(["true"])
        assert result.success, result.stderr

    try:
        return await median_ms(call, rounds)
    finally:
        await env_type.sample_cleanup("bench", config, envs, False)


async def whole_sample(config: str, rounds: int) -> float:
    """One sample's whole life through the plug-in: its wall started, ``exec(["true"])``,
    the wall ended. The same work as ``runner exec -- true``, through inspect."""
    env_type = registry_find_sandboxenv("runner")
    await env_type.task_init("bench", config)

    async def call() -> None:
        envs = await env_type.sample_init("bench", config, {})
        try:
            result = await envs["default"].exec(["true"])
            assert result.success, result.stderr
        finally:
            await env_type.sample_cleanup("bench", config, envs, False)

    return await median_ms(call, rounds)


async def client(rounds: int) -> float:
    with tempfile.TemporaryDirectory() as root:
        async with await Sandbox.start(root=root, backend="landlock") as sb:

            async def call() -> None:
                result = await sb.exec(["true"])
                assert result.code == 0, result.stderr

            return await median_ms(call, rounds)


async def main(rounds: int) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as config:
        config.write('[sandbox]\nbackend = "landlock"\n')
        config.flush()
        figures = {
            "inspect local": await through_inspect("local", None, rounds),
            "inspect runner": await through_inspect("runner", config.name, rounds),
            "runner client": await client(rounds),
            "inspect runner sample": await whole_sample(config.name, max(rounds // 10, 10)),
        }
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
