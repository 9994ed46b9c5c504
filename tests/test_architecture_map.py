"""docs/architecture.md is the newcomer's map: every module it leaves out is a room nobody finds.

Fails when a `.py` module under tkf_infra/, components/, providers/ or policy/ is added (or renamed)
without the map naming it, so the map stays true as the code moves; and when an import breaks the map's
"may import" column: an arrow back up, or two modules importing each other.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
FOLDERS = ("tkf_infra", "components", "providers", "policy")


def modules() -> list[Path]:
    return sorted(p.relative_to(ROOT) for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
                  if ".venv" not in p.parts and p.name != "__init__.py")


def anchor(module: Path) -> str:
    """The package a table row of the map is about: `tkf_infra/<sub>/`, else the top folder."""
    parts = module.parts
    return f"`{parts[0]}/{parts[1]}/" if parts[0] == "tkf_infra" and len(parts) > 2 else f"`{parts[0]}/"


def mentioned(module: Path, lines: list[str]) -> bool:
    """Named by its path anywhere, or by its file name (or `stem`) in the row of its package."""
    if any(module.as_posix() in line for line in lines):
        return True
    names = (module.name, f"`{module.stem}`", f"`{module.stem}`/")
    return any(anchor(module) in line and any(n in line for n in names) for line in lines)


def test_every_module_is_on_the_architecture_map() -> None:
    lines = DOC.read_text().splitlines()
    missing = [m.as_posix() for m in modules() if not mentioned(m, lines)]
    assert not missing, ("docs/architecture.md does not name these modules; add each to its package's row of the "
                         f"'Packages' table (what it owns, what it may import): {', '.join(missing)}")


def test_every_top_level_folder_is_on_the_architecture_map() -> None:
    text = DOC.read_text()
    folders = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
                     and p.name not in ("rendered", "node_modules"))
    missing = [f for f in folders if f"`{f}/" not in text]
    assert not missing, f"docs/architecture.md names no row for these folders: {', '.join(missing)}"


def test_every_module_path_the_map_names_exists() -> None:
    """The other half of "true": a renamed or deleted module leaves no path behind in the map."""
    text = DOC.read_text()
    paths = set(re.findall(r"`((?:tkf_infra|components|providers|policy|bench|scripts|tests|examples)/[\w/]+\.py)",
                           text))
    gone = sorted(p for p in paths if not (ROOT / p).exists())
    assert paths and not gone, f"docs/architecture.md names modules that do not exist: {', '.join(gone)}"


# --------------------------------------------------------------------------------------------
# The "may import" column, enforced
# --------------------------------------------------------------------------------------------

#: Circles other branches are taking apart (issues 39 and 40). Each is named until its fix is merged; the
#: test fails on any other circle, and on one of these once it is gone (then delete its line here).
KNOWN_CIRCLES: dict[frozenset[str], str] = {
}
CHECKED = ("tkf_infra", "components", "providers", "policy")
_TOKEN = re.compile(r"`([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)(?<!\.py)`")
_PATH = re.compile(r"`((?:tkf_infra|components|providers|policy)/[\w/]*(?:\.py)?)`")


def module_name(path: Path) -> str:
    parts = path.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def our_modules() -> dict[str, Path]:
    return {module_name(p.relative_to(ROOT)): p for folder in CHECKED for p in (ROOT / folder).rglob("*.py")
            if ".venv" not in p.parts}


def _resolve(name: str, known: set[str]) -> str | None:
    """``name`` (as imported) → the module of ours it is, or None if not ours."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """Every module of ours ``path`` imports, at any depth (in functions, under TYPE_CHECKING): ``from pkg
    import sub`` is an import of ``pkg.sub`` (not of ``pkg/__init__``) when ``sub`` is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {m for a in node.names if (m := _resolve(a.name, known))}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            subs = [f"{base}.{a.name}" for a in node.names]
            if all(s in known for s in subs):
                found |= set(subs)
            elif m := _resolve(base, known):
                found |= {m, *(s for s in subs if s in known)}
    found.discard(name)
    return found


@dataclass(frozen=True)
class Row:
    """One row of the Packages table: the modules it covers and the modules of ours they may import."""

    line: int
    owners: tuple[str, ...]  # module paths, dotted; a package covers its submodules
    allowed: tuple[str, ...]

    def covers(self, module: str) -> bool:
        return any(module == o or module.startswith(o + ".") for o in self.owners)

    def permits(self, module: str) -> bool:
        return self.covers(module) or any(module == a or module.startswith(a + ".") for a in self.allowed)


def table_rows(known: set[str]) -> list[Row]:
    """The Packages table's rows whose first cell names modules we check, their "may import" cell parsed:
    each backticked lower-case dotted name (a file name, `x.py`, aside) is a module or package of ours
    (`tkf_infra.` may be left out)."""
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## Packages"))
    rows, unknown = [], []
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line.startswith("## "):
            break
        if not line.startswith("| `"):
            continue
        cells = line.strip().strip("|").split(" | ")
        owners = tuple(p.removesuffix(".py").rstrip("/").replace("/", ".") for p in _PATH.findall(cells[0]))
        if not owners:
            continue
        allowed = []
        for token in _TOKEN.findall(cells[-1]):
            full = token if token.split(".")[0] in CHECKED else f"tkf_infra.{token}"
            if full in known or any(k.startswith(full + ".") for k in known):
                allowed.append(full)
            else:
                unknown.append(f"line {i + 1}: `{token}`")
        rows.append(Row(i + 1, owners, tuple(allowed)))
    assert not unknown, f"docs/architecture.md's 'may import' column names modules that do not exist: {unknown}"
    return rows


def row_of(module: str, rows: list[Row]) -> Row | None:
    """The most specific row covering ``module`` (a module's own row before its package's)."""
    covering = [(max(len(o) for o in r.owners if module == o or module.startswith(o + ".")), r)
                for r in rows if r.covers(module)]
    return max(covering, key=lambda c: c[0])[1] if covering else None


def _graph() -> dict[str, set[str]]:
    modules = our_modules()
    known = set(modules)
    return {name: imports_of(path, name, known) for name, path in modules.items()}


def test_every_import_is_one_the_map_allows() -> None:
    graph = _graph()
    rows = table_rows(set(graph))
    homeless = sorted(m for m, deps in graph.items() if deps and row_of(m, rows) is None)
    assert not homeless, f"modules that import ours but are in no row of the Packages table: {homeless}"
    wrong = [f"{m} imports {d} (its row, docs/architecture.md line {row.line}, may import "
             f"{', '.join(row.allowed) or 'nothing of ours'})"
             for m, deps in sorted(graph.items()) if (row := row_of(m, rows)) for d in sorted(deps)
             if not row.permits(d)]
    assert not wrong, ("imports the architecture map does not allow: move the shared type or constant one floor "
                       "below both users, or, if the arrow is right, add it to the row's 'may import' cell:\n"
                       + "\n".join(wrong))


def test_the_may_import_column_runs_one_way() -> None:
    """No row may import (through others) a row that may import it: that arrow would run back up."""
    graph = _graph()
    rows = table_rows(set(graph))
    edges = {r.line: {target.line for a in r.allowed for m in graph if m == a or m.startswith(a + ".")
                      if (target := row_of(m, rows))} - {r.line} for r in rows}
    circles = [c for c in _strongly_connected(edges) if len(c) > 1]
    assert not circles, f"rows of docs/architecture.md that may import each other (by line): {circles}"


def _strongly_connected(graph: Mapping[Any, set[Any]]) -> list[set[Any]]:
    """Tarjan's strongly connected components (iterative: no recursion limit on long chains)."""
    index: dict[Any, int] = {}
    low: dict[Any, int] = {}
    stack: list[Any] = []
    on_stack: set[Any] = set()
    out: list[set[Any]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()), key=str)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ()), key=str))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                out.append(component)
    return out


def test_no_two_modules_import_each_other() -> None:
    circles = {frozenset(c) for c in _strongly_connected(_graph()) if len(c) > 1}
    new = sorted(sorted(c) for c in circles - set(KNOWN_CIRCLES))
    fixed = sorted(f"{sorted(c)} ({why})" for c, why in KNOWN_CIRCLES.items() if c not in circles)
    assert not new, f"modules that import each other (move what they share into a module below both): {new}"
    assert not fixed, f"known circles that are gone: delete them from KNOWN_CIRCLES: {fixed}"


def test_the_import_check_sees_a_circle_and_an_arrow_back_up(tmp_path: Path) -> None:
    """The checks above on a made-up package: a lazy import back up and a TYPE_CHECKING circle are found."""
    (tmp_path / "low.py").write_text("def f():\n    from high import x\n")
    (tmp_path / "high.py").write_text("from typing import TYPE_CHECKING\n"
                                      "if TYPE_CHECKING:\n    from low import f\nx = 1\n")
    known = {"low", "high"}
    graph = {m: imports_of(tmp_path / f"{m}.py", m, known) for m in known}
    assert graph == {"low": {"high"}, "high": {"low"}}
    assert [sorted(c) for c in _strongly_connected(graph) if len(c) > 1] == [["high", "low"]]


#: Package docstrings still listing their modules, owned by another branch (delete once fixed there).
KNOWN_MODULE_LISTS = {"tkf_infra/sizing/__init__.py": "issue 40 (sizing-bound): point to docs/architecture.md"}


def test_the_map_is_the_one_list_of_each_packages_modules() -> None:
    """A package docstring that lists its modules is a second map nothing checks (plan/'s and sizing/'s named a
    third of theirs): name the package's purpose and point to docs/architecture.md instead."""
    listing: list[str] = []
    known: list[str] = []
    for init in sorted(p for folder in CHECKED for p in (ROOT / folder).rglob("__init__.py") if ".venv" not in p.parts):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        siblings = {p.stem for p in init.parent.glob("*.py")} - {"__init__"}
        named = {m for m in re.findall(r"^\s*- `?(\w+)`?[:,]", doc, re.MULTILINE) if m in siblings}
        where = init.relative_to(ROOT).as_posix()
        if len(named) > 1:
            (known if where in KNOWN_MODULE_LISTS else listing).append(where)
    assert not listing, f"package docstrings listing their modules: {listing}"
    assert sorted(known) == sorted(KNOWN_MODULE_LISTS), "a known list is gone: delete it from KNOWN_MODULE_LISTS"
