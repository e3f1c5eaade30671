"""The README's Python client examples run as written against `es-broker serve`.

Every ```python block of the `## Python client` section is a whole program: one
test saves it as a file, with the README's name server address replaced by the
process's, and runs it with `python FILE` against a broker process of its own,
as a reader who copies it does. Blocks under a heading in SKIPPED need a broker
set up otherwise (an ACL account) and are not run here (tests/test_acl_*.py
cover what they show); they still compile as files.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.process_fixtures import ROOT, _env, serve

SECTION = "## Python client"
README_NAMESRV = "127.0.0.1:9876"
SKIPPED = {"Signed requests (ACL)"}
# broker.conf lines a subsection's broker needs, as the README tells the reader to set them
CONF = {"SQL92 filters": ["enablePropertyFilter=true"]}


def python_client_examples(skipped: set[str] | tuple[()] = SKIPPED) -> list[tuple[str, int, str]]:
    """(subsection, line number, code) of each ```python block of the section, but `skipped`'s."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index(SECTION)
    examples = []
    heading = ""
    block: list[str] | None = None
    block_line = 0
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if block is not None:
            if line.strip() == "```":
                if heading not in skipped:
                    examples.append((heading, block_line, "\n".join(block)))
                block = None
            else:
                block.append(line)
            continue
        if line.startswith("## "):
            break
        if line.startswith("### "):
            heading = line[4:].strip()
        elif line.strip() == "```python":
            block, block_line = [], number + 1
    return examples


EXAMPLES = python_client_examples()


def test_the_section_has_the_examples_it_promises():
    headings = [heading for heading, _, _ in EXAMPLES]
    for wanted in (
        "Under asyncio or trio",
        "Producer",
        "Batch send",
        "Push consumer (clustering)",
        "Broadcasting consumer",
        "Orderly consumer",
        "Lite pull consumer",
        "When an operator resets offsets",
        "Transactional messages",
        "Request-reply",
        "SQL92 filters",
    ):
        assert wanted in headings


def test_every_python_block_of_the_readme_is_a_program_python_can_run():
    """`python example.py` of any block: no top-level `await` or `async with` (a SyntaxError)."""
    for heading, line, code in python_client_examples(skipped=()):
        try:
            compile(code, f"README.md:{line}", "exec")
        except SyntaxError as exc:
            raise AssertionError(f"the {heading!r} example at README.md:{line}: {exc}") from None


@pytest.mark.parametrize(
    ("heading", "line", "code"),
    EXAMPLES,
    ids=[re.sub(r"\W+", "-", h).strip("-").lower() for h, _, _ in EXAMPLES],
)
def test_readme_example_runs_as_a_file(tmp_path, heading, line, code):
    assert README_NAMESRV in code, f"the example at README.md:{line} names no name server"
    example = tmp_path / f"readme_{line}.py"
    with serve(tmp_path / "data", conf=CONF.get(heading, ())) as served:
        example.write_text(code.replace(README_NAMESRV, served.namesrv))
        done = subprocess.run(
            [sys.executable, str(example)],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=tmp_path,
            timeout=180,
        )
    assert done.returncode == 0, f"README.md:{line}:\n{done.stdout}\n{done.stderr}"
