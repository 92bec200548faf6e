"""The README's worked example, run as the README prints it against its quick-start server.

Both are read from README.md, so the test fails when either drifts: the quick start's serve
command (`.venv/bin/atlas-planner serve`, no flags: 127.0.0.1 on the port the example's URLs
name, the embedded SQLite store in the working directory) is started from this
environment's `atlas-planner` in a temporary directory; then every `$ ` command of the
"Worked example" console block runs in bash there, and its output must be the lines the
README prints under it. Plan ids are random (uuid4), so a 32-hex id matches any such id;
every other character must be equal. Should another process hold the README's port on this
machine, the server gets a free port and only the port in the commands is changed.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from faultkit import LOAD_TOLERANT_ENV, free_port, hang_guard  # noqa: E402
from serving import stop_process_group, wait_until_answering  # noqa: E402

pytestmark = hang_guard

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ATLAS_PLANNER = Path(sys.executable).parent / "atlas-planner"
PLAN_ID = re.compile(r"[0-9a-f]{32}")
BASE_URL = re.compile(r"http://127\.0\.0\.1:(\d+)")


@dataclass(frozen=True)
class Step:
    """One `$ ` command of a console block and the lines printed under it."""

    command: str
    output: tuple[str, ...]


def section(text: str, heading: str) -> str:
    """The body of a `## heading` section of a Markdown text."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README.md has no '## {heading}' section"
    return match.group(1)


def fenced_blocks(text: str, language: str) -> list[str]:
    """The contents of the ```language blocks of a Markdown text, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.M | re.S)


def console_steps(block: str) -> list[Step]:
    """Split a console block into commands and outputs. A command continues on the next line
    while its line ends in a backslash or a single quote is left open."""
    steps: list[Step] = []
    lines = block.splitlines()
    index = 0
    while index < len(lines):
        assert lines[index].startswith("$ "), f"output before any command: {lines[index]!r}"
        command = lines[index][2:]
        index += 1
        while command.endswith("\\") or command.count("'") % 2:
            command += "\n" + lines[index]
            index += 1
        output = []
        while index < len(lines) and not lines[index].startswith("$ "):
            output.append(lines[index])
            index += 1
        steps.append(Step(command, tuple(output)))
    return steps


def test_the_readme_is_short_and_its_links_resolve() -> None:
    """At most 200 lines; every relative link names a file of the repository (the manual's
    own links are checked by `mkdocs build --strict`)."""
    readme = README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [target for target in targets if not target.startswith(("http://", "https://"))]
    assert "docs/lab.md" in local and "docs/limitations.md" in local
    assert [target for target in local if not (ROOT / target).exists()] == []


def test_console_steps_split_continued_and_quoted_commands() -> None:
    block = "$ echo a \\\n  b\na b\n$ python3 -c '\nprint(1)'\n1\n$ true\n"
    assert console_steps(block) == [Step("echo a \\\n  b", ("a b",)),
                                    Step("python3 -c '\nprint(1)'", ("1",)),
                                    Step("true", ())]


def matches(printed: str, expected: str) -> bool:
    """Equal, except that a 32-hex plan id in the README stands for any such id."""
    pattern = "".join("[0-9a-f]{32}" if PLAN_ID.fullmatch(part) else re.escape(part)
                      for part in re.split(r"([0-9a-f]{32})", expected))
    return re.fullmatch(pattern, printed) is not None


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.slow
def test_the_readme_worked_example_runs_against_the_quick_start_server(tmp_path: Path) -> None:
    readme = README.read_text(encoding="utf-8")
    quick_start = fenced_blocks(section(readme, "Quick start"), "bash")[0]
    serve = quick_start.strip().split(" && ")[-1]
    assert serve == ".venv/bin/atlas-planner serve", serve
    example = fenced_blocks(section(readme, "Worked example"), "console")
    assert len(example) == 1, "the worked example is one console block"
    steps = console_steps(example[0])
    assert steps and all(step.output for step in steps)
    ports = {int(port) for step in steps for port in BASE_URL.findall(step.command)}
    assert len(ports) == 1, f"the example's commands name ports {sorted(ports)}"
    readme_port = ports.pop()
    assert f"http://127.0.0.1:{readme_port}/" in section(readme, "Quick start")
    for tool in ("bash", "curl", "python3"):
        if shutil.which(tool) is None:
            pytest.skip(f"the worked example needs {tool} on PATH")

    port = readme_port if port_is_free(readme_port) else free_port()
    command = [str(ATLAS_PLANNER), "serve"] + ([] if port == readme_port else ["--port", str(port)])
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("DATABASE_URL", "ATLAS_SQLITE_PATH")}
    environment.update(LOAD_TOLERANT_ENV)
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                                  env=environment, start_new_session=True)
    try:
        wait_until_answering(server, f"http://127.0.0.1:{port}", log_path)
        for step in steps:
            script = step.command.replace(f"127.0.0.1:{readme_port}", f"127.0.0.1:{port}")
            done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True,
                                  text=True, timeout=300)
            assert done.returncode == 0, (step.command, done.stderr)
            printed = done.stdout.rstrip("\n").split("\n")
            assert len(printed) == len(step.output), (step.command, done.stdout)
            for line, expected in zip(printed, step.output, strict=True):
                assert matches(line.rstrip("\r"), expected), (step.command, line, expected)
    finally:
        stop_process_group(server)
    assert (tmp_path / "atlas-planner.db").exists(), "the quick start's SQLite default store"
