"""Every reference in the repository's text stays inside the repository.

A user has the repository and nothing else: no link or path may point at a design note or a
notes folder kept beside the checkout (`../shared`, `shared/DESIGN...`, `shared/notes`), at a
developer's checkout (the repository root as it sits on this machine, `/work/...`,
`/root/...`), or at a file that does not exist. Walks README.md, docs/, python/, bench/,
models/ (cards and recipes), scripts/, tests/ and rust/, and checks every markdown link
(relative targets must exist inside the repository, `#anchors` must name a heading) and every
`docs/*.md` path mentioned in code. Each problem is reported as `file:line: what`.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

import pytest
from paths import REPO

ROOT = REPO
THIS = Path(__file__).resolve()

# (folder or file, suffixes); folders are walked recursively
SCANNED = (
    ("README.md", None),
    ("docs", (".md",)),
    ("python", (".py", ".md", ".pyi")),
    ("bench", (".py", ".md")),
    ("models", (".md", ".py", ".sh")),
    ("scripts", (".py", ".sh")),
    ("tests", (".py",)),
    ("rust", (".rs", ".md")),
)
SKIP_DIRS = {"__pycache__", "target", "data", ".venv", "venv", "node_modules", ".git"}

OUTSIDE = re.compile(r"\.\./shared\b|\bshared/(?:DESIGN|notes)\b|\bDESIGN\.md\b")
MACHINE = re.compile(r"(?<![\w.~-])/(?:work|root)/")
DOCS_PATH = re.compile(r"(?<![\w./-])docs/[\w./-]+?\.md\b")
MD_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MD_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def scanned_files(root: Path) -> list:
    out = []
    for name, suffixes in SCANNED:
        top = root / name
        if top.is_file():
            out.append(top)
            continue
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for f in sorted(filenames):
                p = Path(dirpath) / f
                if suffixes is None or p.suffix in suffixes:
                    if p.resolve() != THIS:
                        out.append(p)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    keep = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in " -" or cat[0] in "LMN" or cat == "Pc":
            keep.append(ch)
    return "".join(keep).replace(" ", "-")


def _md_lines(text: str):
    """(line number, line, inside a fenced code block) for a markdown text."""
    fenced = False
    for i, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            yield i, line, True
            continue
        yield i, line, fenced


_anchor_cache: dict = {}


def anchors(path: Path) -> set:
    key = path.resolve()
    if key not in _anchor_cache:
        seen: dict = {}
        found = set()
        for _, line, fenced in _md_lines(path.read_text(encoding="utf-8", errors="replace")):
            if fenced:
                continue
            m = HEADING.match(line)
            if m:
                s = slug(m.group(2))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f"{s}-{n}")
            found.update(HTML_ANCHOR.findall(line))
        _anchor_cache[key] = found
    return _anchor_cache[key]


def _inside(path: str, root: Path) -> bool:
    root_s = os.path.normpath(str(root))
    return path == root_s or path.startswith(root_s + os.sep)


def check_link(target: str, source: Path, root: Path):
    """None if a markdown link target is fine, else what is wrong with it."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:, ...
        return None
    base, _, frag = target.partition("#")
    if not base:
        dest = source
    else:
        if base.startswith("/"):
            return f"link {target!r}: an absolute path"
        joined = os.path.normpath(os.path.join(str(source.parent), base))
        if not _inside(joined, root):
            return f"link {target!r} leaves the repository"
        dest = Path(joined)
        if not dest.exists():
            return f"link {target!r}: no such file in the repository"
    if frag and dest.is_file() and dest.suffix == ".md" and frag not in anchors(dest):
        return f"link {target!r}: no heading #{frag} in {dest.relative_to(root).as_posix()}"
    return None


def problems(path: Path, root: Path) -> list:
    """`file:line: what` for every outside reference, machine path or broken link in a file."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    rel = path.relative_to(root).as_posix() if _inside(str(path), root) else str(path)
    root_s = str(root)
    out = []
    is_md = path.suffix == ".md"
    lines = (
        _md_lines(text) if is_md else ((i, x, False) for i, x in enumerate(text.splitlines(), 1))
    )
    check_outside = "shared" in text or "DESIGN" in text
    check_root = root_s in text
    check_machine = "/work/" in text or "/root/" in text
    check_docs = "docs/" in text
    for i, line, fenced in lines:
        if check_outside:
            for m in OUTSIDE.finditer(line):
                out.append(f"{rel}:{i}: {m.group(0)!r} points outside the repository")
        if check_root and root_s in line:
            out.append(f"{rel}:{i}: the checkout's absolute path {root_s!r}")
        elif check_machine and MACHINE.search(line):
            out.append(f"{rel}:{i}: a machine path {MACHINE.search(line).group(0)!r}...")
        if check_docs and "docs/" in line:
            for m in DOCS_PATH.finditer(line):
                if not (root / m.group(0)).is_file():
                    out.append(f"{rel}:{i}: {m.group(0)!r}: no such page")
        if is_md and not fenced and ("](" in line or "]:" in line):
            prose = line
            if "`" in line:
                prose = re.sub(r"`[^`]*`", lambda c: c.group(0) if "](" in c.group(0) else "", line)
            targets = MD_LINK.findall(prose) + MD_REF_DEF.findall(prose)
            for t in targets:
                why = check_link(t, path, root)
                if why:
                    out.append(f"{rel}:{i}: {why}")
    return out


def test_no_reference_leaves_the_repository():
    files = scanned_files(ROOT)
    assert any(f.name == "README.md" for f in files) and len(files) > 50
    found = [p for f in files for p in problems(f, ROOT)]
    assert not found, "\n".join(found)


def test_the_checker_flags_broken_input(tmp_path):
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "ok.md").write_text("# Fine\n\n## A section (2026)\n", encoding="utf-8")
    bad = root / "README.md"
    bad.write_text(
        "\n".join(
            [
                "# Title",  # 1
                "[design](../shared/DESIGN.md)",  # 2: outside, and leaves the repository
                "see shared/notes/x.md",  # 3
                "[gone](docs/missing.md)",  # 4: no such file
                f"ran in {root}/python",  # 5: the checkout's path
                "output of /work/main/models/v3",  # 6: a machine path
                "[up](../../etc/passwd)",  # 7: leaves the repository
                "[anchor](docs/ok.md#no-such-heading)",  # 8
                "[fine](docs/ok.md#a-section-2026) and [web](https://example.com/x)",  # 9
                "```",
                "[in code](nowhere.md) /tmp/x.wav",  # 11: code blocks are not links
                "```",
                "the page docs/absent.md",  # 13
                "[self](#title) [missing](#nope)",  # 14
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    code = root / "python" / "m.py"
    code.parent.mkdir()
    code.write_text('"""As /root/notes/x.md and DESIGN.md section 4 say."""\n', encoding="utf-8")

    found = problems(bad, root) + problems(code, root)
    lines = {(p.split(":")[0], int(p.split(":")[1])) for p in found}
    assert lines == {
        ("README.md", 2),
        ("README.md", 3),
        ("README.md", 4),
        ("README.md", 5),
        ("README.md", 6),
        ("README.md", 7),
        ("README.md", 8),
        ("README.md", 13),
        ("README.md", 14),
        ("python/m.py", 1),
    }, "\n".join(found)
    assert any("leaves the repository" in p for p in found)
    assert any("no heading #no-such-heading" in p for p in found)
    assert sum(p.startswith("python/m.py:1:") for p in found) == 2  # machine path + DESIGN
    assert {f.name for f in scanned_files(root)} == {"README.md", "ok.md", "m.py"}


@pytest.mark.parametrize(
    "heading, anchor",
    [
        ("Qwen3-TTS at its real size (2026-12-01)", "qwen3-tts-at-its-real-size-2026-12-01"),
        ("What `codecspec bench` prints", "what-codecspec-bench-prints"),
        ("0. Why v1's codes defeat speculation", "0-why-v1s-codes-defeat-speculation"),
        ("Against the targets → 2×", "against-the-targets--2"),
    ],
)
def test_slug_is_githubs(heading, anchor):
    assert slug(heading) == anchor
