"""Shared by the tests: the runner binary they drive, and the image the docker ones use.

The tests never skip: runner must be there (``RUNNER_BIN``, as ``cargo test`` sets it, or
``runner`` on PATH) and so must the docker engine with the sandbox image (``runner image
build``), as the Rust suites that run this one make sure.
"""

from __future__ import annotations

import os

import pytest

from runner_sandbox import runner_bin

#: The image the docker tests serve as a task image.
IMAGE = os.environ.get("RUNNER_TEST_IMAGE", "runner-sandbox:bookworm")


@pytest.fixture(scope="session", autouse=True)
def runner() -> str:
    return runner_bin()
