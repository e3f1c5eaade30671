"""The README's Python client examples run as written against `es-broker serve`.

Every ```python block of the `## Python client` section is one test: the block
runs with top-level await (as the README shows it) against a broker process
of its own, with the README's name server address replaced by the process's;
a block that starts its own event loop (`asyncio.run`, `trio.run`) runs in a
thread.
Blocks under a heading in SKIPPED need a broker set up otherwise (an ACL
account) and are not run here; tests/test_acl_*.py cover what they show.
"""

from __future__ import annotations

import ast
import inspect
import re

import pytest
import trio

from tests.process_fixtures import ROOT, serve

SECTION = "## Python client"
README_NAMESRV = "127.0.0.1:9876"
SKIPPED = {"Signed requests (ACL)"}
# broker.conf lines a subsection's broker needs, as the README tells the reader to set them
CONF = {"SQL92 filters": ["enablePropertyFilter=true"]}


def python_client_examples() -> list[tuple[str, int, str]]:
    """(subsection, line number, code) of each runnable ```python block of the section."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index(SECTION)
    examples = []
    heading = ""
    block: list[str] | None = None
    block_line = 0
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if block is not None:
            if line.strip() == "```":
                if heading not in SKIPPED:
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


@pytest.mark.parametrize(
    ("heading", "line", "code"),
    EXAMPLES,
    ids=[re.sub(r"\W+", "-", h).strip("-").lower() for h, _, _ in EXAMPLES],
)
async def test_readme_example_runs(tmp_path, heading, line, code):
    assert README_NAMESRV in code, f"the example at README.md:{line} names no name server"
    with serve(tmp_path / "data", conf=CONF.get(heading, ())) as served:
        source = code.replace(README_NAMESRV, served.namesrv)
        compiled = compile(
            source, f"README.md:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        namespace: dict = {"__name__": "readme_example"}
        if compiled.co_flags & inspect.CO_COROUTINE:
            await eval(compiled, namespace)  # noqa: S307 (the README's own examples)
        else:
            # a block that runs an event loop of its own (asyncio.run, trio.run) runs in a
            # thread, away from the test's trio loop
            await trio.to_thread.run_sync(eval, compiled, namespace)
