"""The direction of imports (docs/design.md §2): the import-linter contracts in pyproject.toml.

Imports run down the layers, from cli at the top to remoting, log and the top-level leaf
modules at the bottom, with no cycle among the modules of any package; the client and the
dashboard reach the broker over the wire only. `lint-imports` (the venv's, next to this
interpreter) checks the checkout's es_broker against them, as .ci/run does. An import inside a
function or under `if TYPE_CHECKING:` counts as much as one at module level. docs/design.md §2
lists the layers of the contract, and is held to them here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(package_root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` with the project's contracts over the es_broker found in package_root."""
    if not LINT_IMPORTS.exists():
        pytest.skip("lint-imports is not installed (the dev extra has it)")
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(ROOT / "pyproject.toml")],
        cwd=package_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_checkout_keeps_the_import_contracts():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_layers_of_design_section_2_are_the_contract():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [layers] = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    section = (ROOT / "docs" / "design.md").read_text().split("\n## 2.")[1].split("\n## ")[0]
    blocks = re.findall(r"```\n(.*?)```", section, re.S)
    assert [line.strip() for line in blocks[1].splitlines()] == layers


@pytest.mark.parametrize(
    "added",
    [
        "\n\ndef _upward() -> None:\n    from es_broker.commands import errors  # noqa: F401\n",
        "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        "    from es_broker.server.main import BrokerServer  # noqa: F401\n",
    ],
    ids=["in-function", "type-checking"],
)
def test_an_upward_import_inside_a_function_or_for_types_breaks_the_layers(tmp_path, added):
    shutil.copytree(ROOT / "es_broker", tmp_path / "es_broker", ignore=_not_source)
    scan = tmp_path / "es_broker" / "log" / "scan.py"
    scan.write_text(scan.read_text() + added)
    result = _lint_imports(tmp_path)
    assert result.returncode != 0
    assert "es_broker.log is not allowed to import" in result.stdout


def _not_source(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or n.endswith((".so", ".c"))}
