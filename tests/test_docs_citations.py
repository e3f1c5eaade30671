"""Every behaviour the code and tests cite is defined in the repository's docs.

Behaviours are cited as ``B-<n>`` in comments, docstrings and docs, and pinned
by tests named ``test_b<n>_...``. Each number must be defined in
docs/baseline.md (RocketMQ 4.9.8's baseline, up to 134) or docs/semantics.md
(from 135 on): as a heading that starts with it or as a bold item
(``**B-<n>``). A range ``B-<a>..B-<b>`` that repeats a section heading's range
is a citation of that section. No file may send the reader to documents that
are not in the repository, nor to a file of the repository that is not there
(a path such as `es_broker/server/routes.py`, or one inside the package such as
`server/edge/tls.py`, once that file moved).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("docs/baseline.md", "docs/semantics.md")
CITING = ("es_broker", "tests", "bench", "spark", "README.md")
SKIP_DIRS = {"node_modules", "__pycache__", ".pytest_cache", ".ruff_cache"}

CITE = re.compile(r"(?<![\w-])B-(\d{1,3})\b")
TEST_NAME = re.compile(r"\btest_b(\d{2,3})(?=_)")
RANGE = re.compile(r"(?<![\w-])B-(\d{1,3})\s*\.\.\s*B-(\d{1,3})\b")
BOLD = re.compile(r"\*\*B-(\d{1,3})\b")
HEADING = re.compile(r"^#{1,6}\s+B-(\d{1,3})\b", re.M)
HEADING_RANGE = re.compile(r"^#{1,6}\s.*?\bB-(\d{1,3})\.\.B-(\d{1,3})\b", re.M)

# Places that may name documents outside the repository: none. This file
# spells the names it forbids, so it is not scanned for them.
FORBIDDEN = (
    re.compile(r"DESIGN\.md"),
    re.compile(r"remoting spec", re.I),
    re.compile(r"remoting-protocol\.md"),
    re.compile(r"/shared/"),
)

# Numbers cited but defined nowhere, each reported and kept on purpose: none.
ALLOWED_UNDEFINED: frozenset[int] = frozenset()


def _citing_files() -> list[Path]:
    files: list[Path] = []
    for name in CITING:
        top = ROOT / name
        if top.is_file():
            files.append(top)
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            files.extend(Path(dirpath) / f for f in sorted(filenames))
    return files


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def _defined() -> tuple[set[int], set[tuple[int, int]]]:
    items: set[int] = set()
    sections: set[tuple[int, int]] = set()
    for doc in DOCS:
        text = (ROOT / doc).read_text(encoding="utf-8")
        items.update(int(n) for n in BOLD.findall(text))
        items.update(int(n) for n in HEADING.findall(text))
        sections.update((int(a), int(b)) for a, b in HEADING_RANGE.findall(text))
    return items, sections


def _citations() -> dict[int, set[str]]:
    _, sections = _defined()
    cited: dict[int, set[str]] = {}
    for path in _citing_files():
        text = _text(path)
        if text is None:
            continue
        rel = str(path.relative_to(ROOT))
        # A range naming a whole section cites the section, not its end points.
        for m in RANGE.finditer(text):
            if (int(m.group(1)), int(m.group(2))) in sections:
                text = text.replace(m.group(0), "")
        for n in CITE.findall(text) + TEST_NAME.findall(text):
            cited.setdefault(int(n), set()).add(rel)
    return cited


def test_baseline_defines_the_items_in_order() -> None:
    text = (ROOT / "docs/baseline.md").read_text(encoding="utf-8")
    numbers = [int(n) for n in re.findall(r"^\*\*B-(\d+) ", text, re.M)]
    assert numbers == list(range(1, 135))


def test_every_cited_behaviour_is_defined() -> None:
    items, _ = _defined()
    cited = _citations()
    assert cited, "no citations found: the scan is broken"
    undefined = {
        n: sorted(files)
        for n, files in sorted(cited.items())
        if n not in items and n not in ALLOWED_UNDEFINED
    }
    report = "\n".join(f"  B-{n}: {', '.join(files)}" for n, files in undefined.items())
    assert not undefined, f"cited but defined in neither {' nor '.join(DOCS)}:\n{report}"


def test_allow_list_is_still_needed() -> None:
    items, _ = _defined()
    stale = sorted(n for n in ALLOWED_UNDEFINED if n in items or n not in _citations())
    assert not stale, f"remove from ALLOWED_UNDEFINED: {stale}"


def test_no_file_points_outside_the_repository() -> None:
    me = Path(__file__).resolve()
    paths = _citing_files() + sorted((ROOT / "docs").glob("*.md"))
    hits = []
    for path in paths:
        if path.resolve() == me:
            continue
        text = _text(path)
        if text is None:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in FORBIDDEN):
                hits.append(f"  {path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not hits, "outside documents cited:\n" + "\n".join(hits)


def _cited_path() -> re.Pattern[str]:
    """A repository path a text cites: from a top directory, or from a package of es_broker."""
    packages = {p.name for p in (ROOT / "es_broker").rglob("*") if p.is_dir()} - SKIP_DIRS
    tops = sorted({"es_broker", "tests", "bench", "spark", "docs", "migrations"} | packages)
    names = "|".join(map(re.escape, tops))
    return re.compile(
        r"(?<![\w/.-])((?:" + names + r")/[\w/.-]*\w\.(?:py|pyx|pxd|md|toml|yml|yaml|sql|html))\b"
    )


def test_every_cited_path_exists() -> None:
    cited = _cited_path()
    # a path inside the package is read from es_broker/ or from es_broker/server/
    bases = (ROOT, ROOT / "es_broker", ROOT / "es_broker" / "server")
    paths = _citing_files() + sorted((ROOT / "docs").glob("*.md"))
    missing = []
    for path in paths:
        text = _text(path)
        if text is None:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in cited.finditer(line):
                if not any((base / m.group(1)).exists() for base in bases):
                    missing.append(f"  {path.relative_to(ROOT)}:{lineno}: {m.group(1)}")
    assert not missing, "paths cited that are not in the repository:\n" + "\n".join(missing)
