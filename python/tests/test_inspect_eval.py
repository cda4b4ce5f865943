"""A real inspect_ai eval with ``sandbox="runner"``: inspect's ``mockllm`` model is
scripted to call the ``bash`` tool, the tool runs in runner's wall, and a scorer reads
what the command left in the sandbox. One sample's command is right and one's is wrong,
so a sandbox that lost the file, ran the command on the host, or mixed up the samples'
walls scores differently."""

from __future__ import annotations

from pathlib import Path

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate, use_tools
from inspect_ai.tool import bash
from inspect_ai.util import sandbox

MODEL = "mockllm/model"


def script(command: str) -> list[ModelOutput]:
    """The model's two turns: run ``command`` with bash, then say it is done. Each has
    its usage given, or mockllm would count tokens with a tokenizer it downloads."""
    turns = [
        ModelOutput.for_tool_call(
            model=MODEL, tool_name="bash", tool_arguments={"command": command}
        ),
        ModelOutput.from_content(model=MODEL, content="done"),
    ]
    for turn in turns:
        turn.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    return turns


@scorer(metrics=[accuracy()])
def answer_file():  # type: ignore[no-untyped-def]
    async def score(state: TaskState, target: Target) -> Score:
        try:
            answer = (await sandbox().read_file("answer.txt")).strip()
        except FileNotFoundError:
            return Score(value=INCORRECT, explanation="no answer.txt in the sandbox")
        # The wall is runner's: the command saw landlock's sandbox, not the host.
        where = await sandbox().exec(["sh", "-c", "cat /proc/self/status | grep Seccomp:"])
        walled = where.stdout.split()[-1] == "2"
        right = answer == target.text and walled
        return Score(value=CORRECT if right else INCORRECT, answer=answer)

    return score


def run(command: str, target: str, tmp_path: Path, sandbox_spec: object) -> float:
    task = Task(
        dataset=[Sample(input="Write 6 times 7 to answer.txt.", target=target)],
        solver=[use_tools([bash()]), generate()],
        scorer=answer_file(),
        sandbox=sandbox_spec,
    )
    model = get_model(MODEL, custom_outputs=script(command))
    [log] = eval(task, model=model, log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    assert log.results is not None
    return float(log.results.scores[0].metrics["accuracy"].value)


def test_a_scripted_agent_is_scored_through_runner(tmp_path: Path) -> None:
    config = tmp_path / "runner.toml"
    config.write_text('[sandbox]\nbackend = "landlock"\n')
    assert run("echo $((6*7)) > answer.txt", "42", tmp_path, "runner") == 1.0
    assert run("echo 41 > answer.txt", "42", tmp_path, ("runner", str(config))) == 0.0
