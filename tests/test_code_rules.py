"""The written rules of how es_broker/ reads, held in CI (docs/design.md §2 and the README's architecture).

- no function over 120 lines, no module over 700;
- a behaviour id in a comment comes with the rule it names: never `# B-123` alone;
- outside remoting/, nothing names the wire map `ext_fields`: requests and answers are read
  and written through their header classes (remoting/headers.py);
- comments and docstrings describe the code as it is, not what it used to be.

Each check reads the source (ast, tokenize), so a violation names its file and line.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "es_broker"
MAX_FUNCTION_LINES = 120
MAX_MODULE_LINES = 700

# A comment that is only behaviour ids (B-) or semantic choices (S-): "# B-123", "# (B-12, S-3)".
ONLY_IDS = re.compile(r"#\s*\(?\s*[BS]-\d+(\s*(,|\.\.|/|and)\s*[BS]-\d+)*\s*\)?\s*[.:]?\s*$")
# History told in a comment or docstring. "used to" only after a subject, not in "is used to
# build" (a purpose); "as before" alone is not a hit, since "answers as before sealing" is not
# history.
HISTORY = re.compile(
    r"(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bwas )(?<!\bwere )(?<!, )\bused\s+to\b"
    r"|\bby\s+(its|their|an)\s+earlier\s+name\b"
    r"|\bas\s+before\s+\w+\s+existed\b"
    r"|\bwas\s+before\b",
    re.IGNORECASE,
)

# Lines in files another branch owns, fixed there; each must still hold its finding, so an entry
# is removed once its line is fixed.
PENDING_EXT_FIELDS: set[tuple[str, int]] = set()
PENDING_HISTORY: set[tuple[str, int]] = set()


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _comments(source: str) -> list[tuple[int, str]]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]


def _docstrings(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                text = body[0].value.value
                if isinstance(text, str):
                    found.append((body[0].lineno, text))
    return found


def _line_of(start: int, text: str, match: re.Match[str]) -> int:
    return start + text.count("\n", 0, match.start())


def _with_pending(found: set[tuple[str, int]], pending: set[tuple[str, int]]) -> set[str]:
    """The findings not pending elsewhere, and any pending entry that no longer holds."""
    problems = {f"{name}:{line}" for name, line in found - pending}
    problems |= {
        f"{name}:{line} is fixed: drop it from the pending list" for name, line in pending - found
    }
    return problems


def test_no_function_is_over_120_lines() -> None:
    long = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{_name(path)}:{node.lineno} {node.name} has {lines} lines")
    assert long == []


def test_no_module_is_over_700_lines() -> None:
    long = []
    for path in _modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            long.append(f"{_name(path)} has {lines} lines")
    assert long == []


def test_a_behaviour_id_in_a_comment_says_its_rule() -> None:
    bare = []
    for path in _modules():
        for line, comment in _comments(path.read_text(encoding="utf-8")):
            if ONLY_IDS.fullmatch(comment):
                bare.append(f"{_name(path)}:{line} {comment}")
    assert bare == []


def test_only_remoting_names_the_wire_map_ext_fields() -> None:
    found = set()
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix not in (".py", ".pyx", ".pxd") or _name(path).startswith("remoting/"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "ext_fields" in line:
                found.add((_name(path), number))
    assert _with_pending(found, PENDING_EXT_FIELDS) == set()


def test_comments_do_not_tell_history() -> None:
    found = set()
    for path in _modules():
        source = path.read_text(encoding="utf-8")
        texts = _comments(source) + _docstrings(ast.parse(source))
        for start, text in texts:
            for match in HISTORY.finditer(text):
                found.add((_name(path), _line_of(start, text, match)))
    assert _with_pending(found, PENDING_HISTORY) == set()
