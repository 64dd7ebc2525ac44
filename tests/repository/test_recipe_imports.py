"""Every name the recipes, benches and scripts import from codecspec exists.

They import the runtime lazily, inside the function that needs it (torch and the training
stack load only for the step that runs), so importing their modules proves nothing: when a
refactor removed `codecspec.families.v2.model.V2FrameDecoder`, `models/recipe/v2.py` kept
naming it and `v3.py ship` failed hours into a rebuild. This reads each `from codecspec.X
import Y` statement, at any depth, and looks Y up in X's source without importing it (no
torch needed): a module-level definition, assignment or import of that name, or a
submodule. Shown a broken tree, it must flag the missing name."""

import ast
from pathlib import Path

from paths import REPO

PACKAGE_ROOT = REPO / "python"
SCANNED = ("models/recipe", "bench", "scripts")


def _module_file(module: str, root: Path):
    base = root.joinpath(*module.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def _top_level_names(f: Path) -> set:
    names = set()
    for node in ast.parse(f.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):  # names defined under a guard
            for sub in ast.walk(node):
                if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                    names.add(sub.name)
                elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                    names |= {(a.asname or a.name).split(".")[0] for a in sub.names}
                elif isinstance(sub, ast.Assign):
                    names |= {
                        n.id for t in sub.targets for n in ast.walk(t) if isinstance(n, ast.Name)
                    }
    return names


def missing_names(files, root: Path = PACKAGE_ROOT) -> list:
    """(file, line, "module.name") of every codecspec name imported by `files` that `root`'s
    package does not define."""
    found, cache = [], {}
    for path in files:
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
                continue
            if node.module.split(".")[0] != "codecspec":
                continue
            f = _module_file(node.module, root)
            if f is None:
                found.append((str(path), node.lineno, node.module))
                continue
            if f not in cache:
                cache[f] = _top_level_names(f)
            for a in node.names:
                sub = _module_file(f"{node.module}.{a.name}", root)
                if a.name != "*" and a.name not in cache[f] and sub is None:
                    found.append((str(path), node.lineno, f"{node.module}.{a.name}"))
    return found


def _scanned_files():
    return sorted(p for d in SCANNED for p in (REPO / d).rglob("*.py"))


def test_every_codecspec_name_the_recipes_import_exists():
    files = _scanned_files()
    assert len(files) > 20
    assert missing_names(files) == []


def test_a_removed_name_is_flagged(tmp_path):
    """The broken tree: a package whose module lost a class a recipe still imports (in a
    function, as the recipes do), and a module that is gone altogether."""
    pkg = tmp_path / "codecspec" / "families"
    pkg.mkdir(parents=True)
    (tmp_path / "codecspec" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text("class Kept:\n    pass\n\nLIMIT = 3\n")
    recipe = tmp_path / "recipe.py"
    recipe.write_text(
        "def ship():\n"
        "    from codecspec.families.model import Kept, LIMIT, Removed\n"
        "    from codecspec.families import model\n"
        "    from codecspec.gone import thing\n"
    )
    got = {name for _, _, name in missing_names([recipe], tmp_path)}
    assert got == {"codecspec.families.model.Removed", "codecspec.gone"}
