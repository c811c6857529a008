"""The tests mirror the packages (tests/README.md): tests/<package path>/test_<module>.py,
or test_<module>_<aspect>.py, for a module or subpackage <module> of that package; a file
not named after a module says why in its docstring ("Not named after a module: ...").
tests/integration holds tests across packages, tests/helpers the shared helpers, and
tests/ itself only the repository-wide checks named in REPO_WIDE.

`python -m tests.test_layout` lists the modules with logic that have no test file."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PACKAGES = ("asct_jax", "factor_jax", "experiments")
# Top-level test files: checks of the repository as a whole, not of one module.
REPO_WIDE = {"test_import_graph.py", "test_experiments_layout.py", "test_layout.py"}
NOT_NAMED = "Not named after a module:"


def _docstring(path):
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def _test_files():
    return sorted(p for p in TESTS.rglob("*.py")
                  if "__pycache__" not in p.parts and ".pytest_cache" not in p.parts)


def _names_in(package_dir):
    """The modules (x.py) and subpackages (x/__init__.py) of a package folder."""
    return ({p.stem for p in package_dir.glob("*.py") if p.name != "__init__.py"}
            | {p.parent.name for p in package_dir.glob("*/__init__.py")})


def _tested_by(name, names):
    """The module of `names` a test file test_<name>.py is named after: <module> itself
    or the longest <module> with test_<module>_<aspect>.py; None when none is."""
    stem = name[len("test_"):-len(".py")]
    parts = stem.split("_")
    for k in range(len(parts), 0, -1):
        if "_".join(parts[:k]) in names:
            return "_".join(parts[:k])
    return None


def test_every_test_folder_is_a_package():
    """An __init__.py in every test folder: test files in different folders may share a
    basename (tests/asct_jax/infra/test_curves.py and
    tests/experiments/harness/test_curves.py)."""
    folders = {p.parent for p in _test_files()}
    assert sorted(str(f.relative_to(ROOT)) for f in folders
                  if not (f / "__init__.py").exists()) == []


def test_every_test_file_mirrors_a_module_or_says_why():
    wrong = []
    for path in _test_files():
        rel = path.relative_to(TESTS)
        name = path.name
        if name == "__init__.py" or rel.parts[0] == "helpers":
            continue
        if len(rel.parts) == 1:
            if name not in {"conftest.py"} | REPO_WIDE:
                wrong.append(f"{rel}: top-level file not in REPO_WIDE")
            continue
        if not name.startswith("test_"):
            wrong.append(f"{rel}: not a test file (helpers go to tests/helpers)")
            continue
        if rel.parts[0] == "integration":
            continue
        package_dir = ROOT.joinpath(*rel.parts[:-1])
        if rel.parts[0] not in PACKAGES or not (package_dir / "__init__.py").exists():
            wrong.append(f"{rel}: {package_dir.relative_to(ROOT)} is not a package")
        elif _tested_by(name, _names_in(package_dir)) is None and \
                NOT_NAMED not in _docstring(path):
            wrong.append(f"{rel}: no module of {package_dir.relative_to(ROOT)} named "
                         f"{name[5:-3]} and no '{NOT_NAMED}' in its docstring")
    assert wrong == []


def _has_logic(path):
    """A function at the top level or a method in a class: not a pure data / constants
    module (configs, tables of numbers, NamedTuples without methods)."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return True
        if isinstance(node, ast.ClassDef) and any(
                isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in node.body):
            return True
    return False


def untested_modules():
    """Modules with logic in the packages (not __init__, not experiments/configs) without a
    test file of their own in the mirrored folder."""
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if path.name == "__init__.py" or rel.parts[:2] == ("experiments", "configs"):
                continue
            if not _has_logic(path):
                continue
            folder = TESTS.joinpath(*rel.parts[:-1])
            tests = [p.name for p in folder.glob("test_*.py")] if folder.is_dir() else []
            names = _names_in(path.parent)
            if not any(_tested_by(t, names) == path.stem for t in tests):
                out.append(str(rel))
    return out


if __name__ == "__main__":
    print("\n".join(untested_modules()))
