"""Harbor's oracle over the task folders in ``fixtures/harbor``, each trial in runner's
environment (``--env runner_sandbox.harbor:RunnerEnvironment``), against ``runner eval``
on the same folders.

The folders: ``right`` (reward 1, and the container holds the task's 512 MiB and one
CPU), ``wrong`` (reward 0), ``crash`` (the verifier dies before writing a reward: Harbor's
own ``RewardFileNotFoundError``, no verdict), ``network`` (the agent's phase may reach
``allowed.test`` alone, the verifier's nothing) and ``compose`` (refused by name).

``public`` and ``allowlist`` never reach the host's own addresses, so the test stands in
for the internet as ``tests/eval_network.rs`` does: runner's upstream proxy
(``http_proxy`` in runner's environment) is the test's server, which answers any host
itself (``served HOST PATH``) and notes what it was asked. A name under ``.test``
resolves nowhere, so what it saw came through runner's proxy past the phase's rules.
"""

from __future__ import annotations

import json
import os
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "harbor"
TASKS = ["right", "wrong", "crash", "network"]
ENV = "runner_sandbox.harbor:RunnerEnvironment"


def harbor_cli() -> list[str]:
    """Harbor's command line in this Python (a moved venv's scripts name an old path)."""
    return [
        sys.executable,
        "-c",
        "import sys; from harbor.cli.main import app; sys.argv[0] = 'harbor'; app()",
    ]


class _Answer(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = self.rfile.readline().decode(errors="replace")
        while self.rfile.readline().strip():
            pass
        target = line.split(" ")[1] if line.count(" ") >= 2 else ""
        host, path = "", target
        if target.startswith("http://"):
            rest = target[len("http://") :]
            authority, _, tail = rest.partition("/")
            host, path = authority.split(":")[0], "/" + tail
        self.server.seen.append((host, path))  # type: ignore[attr-defined]
        body = f"served {host} {path}\n".encode()
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
            % (len(body), body)
        )


class Internet(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.seen: list[tuple[str, str]] = []


@pytest.fixture(scope="module")
def internet() -> Iterator[Internet]:
    server = Internet()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def _env(internet: Internet, home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
    }
    env["http_proxy"] = f"http://127.0.0.1:{internet.server_address[1]}"
    # Harbor's LiteLLM would fetch its price list (retrying for seconds) from a network
    # this machine may not have.
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["XDG_DATA_HOME"] = str(home / "data")
    env["XDG_CONFIG_HOME"] = str(home / "config")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")]
    )
    return env


def _trials(jobs: Path) -> dict[str, Path]:
    """Each task's trial folder in the one job under ``jobs``."""
    (job,) = [p for p in jobs.iterdir() if p.is_dir()]
    return {p.name.split("__")[0]: p for p in job.iterdir() if p.is_dir()}


@pytest.fixture(scope="module")
def runs(internet: Internet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Harbor over every folder (compose too), and runner eval over the four it runs."""
    home = tmp_path_factory.mktemp("harbor")
    env = _env(internet, home)
    harbor = subprocess.run(
        [*harbor_cli(), "run", "-p", str(FIXTURES), "--agent", "oracle", "--env", ENV]
        + ["-o", str(home / "jobs"), "-n", "2", "-y", "-q"],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=600,
    )
    harbor_seen = list(internet.seen)
    internet.seen.clear()
    out = home / "eval"
    evaluated = subprocess.run(
        [os.environ["RUNNER_BIN"], "eval", "run"]
        + [str(FIXTURES / t) for t in TASKS]
        + ["--agent", "oracle", "--out", str(out), "--jobs", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = f"harbor:\n{harbor.stdout}\n{harbor.stderr}\neval:\n{evaluated.stderr}"
    return {
        "trials": _trials(home / "jobs"),
        "eval": {
            t: json.loads((out / "tasks" / t / "result.json").read_text()) for t in TASKS
        },
        "harbor_seen": harbor_seen,
        "eval_seen": list(internet.seen),
        "said": said,
    }


def _result(trial: Path) -> dict[str, Any]:
    return json.loads((trial / "result.json").read_text())


def _reward(result: dict[str, Any]) -> float | None:
    verified = result.get("verifier_result") or {}
    return (verified.get("rewards") or {}).get("reward")


def _exception(result: dict[str, Any]) -> tuple[str, str]:
    info = result.get("exception_info") or {}
    return info.get("exception_type", ""), info.get("exception_message", "")


def test_oracle_verdicts_are_runner_evals(runs: dict[str, Any]) -> None:
    said = runs["said"]
    verdicts = {}
    for task in TASKS:
        result = _result(runs["trials"][task])
        verdicts[task] = (
            _reward(result),
            _exception(result)[0] or None,
            runs["eval"][task]["status"],
            runs["eval"][task].get("reward"),
        )
    assert verdicts == {
        "right": (1.0, None, "resolved", 1.0),
        "wrong": (0.0, None, "unresolved", 0.0),
        # Harbor's own environments give a verifier that wrote no reward this error, not
        # a score; runner eval calls it unresolved, saying it wrote no reward.
        "crash": (None, "RewardFileNotFoundError", "unresolved", 0.0),
        "network": (1.0, None, "resolved", 1.0),
    }, said
    assert "wrote neither" in runs["eval"]["crash"]["error"], runs["eval"]["crash"]


def test_a_crashing_verifier_is_harbors_error_with_its_output(runs: dict[str, Any]) -> None:
    trial = runs["trials"]["crash"]
    kind, message = _exception(_result(trial))
    assert kind == "RewardFileNotFoundError", runs["said"]
    assert "reward.txt" in message
    # The verifier's output came back through the download of /logs/verifier.
    stdout = (trial / "verifier" / "test-stdout.txt").read_text()
    assert "starting the checks" in stdout
    assert "pytest-that-is-not-installed" in stdout


def test_each_phase_reaches_what_its_network_mode_allows(runs: dict[str, Any]) -> None:
    for seen in (runs["harbor_seen"], runs["eval_seen"]):
        # The agent's allow-listed fetch arrived; the other host and the verifier's
        # no-network fetch never left the container.
        assert ("allowed.test", "/page") in seen, runs["said"]
        assert not [h for h, _ in seen if h == "denied.test"], seen
        assert ("allowed.test", "/verifier") not in seen, seen
    trail = runs["trials"]["network"] / "runner-audit.jsonl"
    lines = [json.loads(line) for line in trail.read_text().splitlines()]
    messages = [line.get("message", "") for line in lines]
    assert lines[0]["class_name"] == "Application Lifecycle", lines[0]
    assert any(m.startswith("allow allowed.test:80") for m in messages), messages
    assert any(m.startswith("deny denied.test:80") for m in messages), messages
    assert any(m.startswith("deny allowed.test:80") for m in messages), messages
    assert lines[-1]["activity_name"] == "Stop", lines[-1]


def test_a_compose_task_is_refused_naming_compose(runs: dict[str, Any]) -> None:
    kind, message = _exception(_result(runs["trials"]["compose"]))
    assert kind == "ValueError", runs["said"]
    assert "docker compose" in message and "docker-compose.yaml" in message, message
    # Refused before runner was asked for anything.
    assert not (runs["trials"]["compose"] / "runner-environment.json").exists()


def test_nothing_is_left_after_the_trials(runs: dict[str, Any]) -> None:
    for task in TASKS:
        about = json.loads(
            (runs["trials"][task] / "runner-environment.json").read_text()
        )
        assert about["container"], about
        listed = subprocess.run(
            ["docker", "ps", "-aq", "--no-trunc", "--filter", f"id={about['container']}"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert listed.stdout.strip() == "", f"{task}: container left: {listed.stdout}"
        assert not Path(f"/proc/{about['runner_pid']}").exists() or (
            "runner" not in Path(f"/proc/{about['runner_pid']}/cmdline").read_text()
        ), f"{task}: runner eval environment still running"


def test_resource_requests_are_refused_as_capabilities_say(tmp_path: Path) -> None:
    ran = subprocess.run(
        [*harbor_cli(), "run", "-p", str(FIXTURES / "right"), "--agent", "oracle"]
        + ["--env", ENV, "--cpus", "request", "-o", str(tmp_path / "jobs"), "-y", "-q"],
        env={
            **os.environ,
            "PYTHONPATH": str(Path(__file__).parents[1]),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Refused at the job's preflight, before any container (rich wraps the line).
    said = " ".join((ran.stdout + ran.stderr).split())
    assert ran.returncode != 0, said
    assert "does not support CPU resource requests" in said, said
