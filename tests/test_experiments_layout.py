"""experiments/ laid out by use (issue 50): entry points in tables/, studies/, bench/,
checks/ and harness/, only reproduce.py and train.py at the top; every module at most 500
lines; no sys.path edits; every `python -m experiments.X` the README, experiments/README.md
and the docs name is a module that exists. Static: nothing is imported but find_spec's
parents."""
import ast
import importlib.util
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
TOP = {"__init__.py", "reproduce.py", "train.py"}
FOLDERS = ("tables", "studies", "bench", "checks", "harness")
MAX_LINES = 500
# Modules of retired code the results pages keep as history: each page naming one says
# where the code is kept (the tag).
RETIRED = {"experiments.asct_table": "earlier-variants"}
COMMAND = re.compile(r"python3? -m (experiments(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def _modules():
    return sorted(p for p in EXPERIMENTS.rglob("*.py") if "artifacts" not in p.parts)


def _docs():
    pages = [ROOT / "README.md", EXPERIMENTS / "README.md"]
    pages += [p for p in sorted((ROOT / "docs").rglob("*.md"))
              if (ROOT / "docs" / "results" / "data") not in p.parents]
    return pages


def test_only_the_main_job_and_one_run_at_the_top():
    assert {p.name for p in EXPERIMENTS.glob("*.py")} == TOP


def test_every_folder_is_a_package_with_a_docstring():
    for folder in FOLDERS:
        init = EXPERIMENTS / folder / "__init__.py"
        assert init.exists(), folder
        assert ast.get_docstring(ast.parse(init.read_text())), folder


def test_every_module_at_most_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_no_sys_path_edits():
    edits = []
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if (isinstance(node, ast.Attribute) and node.attr == "path"
                    and isinstance(node.value, ast.Name) and node.value.id == "sys"):
                edits.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not edits, edits


def test_every_documented_command_names_a_module_that_exists():
    missing = []
    for page in _docs():
        text = page.read_text()
        for name in sorted(set(COMMAND.findall(text))):
            if name in RETIRED and RETIRED[name] in text:
                continue
            try:
                found = importlib.util.find_spec(name) is not None
            except ModuleNotFoundError:   # a parent package that does not exist
                found = False
            if not found:
                missing.append(f"{page.relative_to(ROOT)}: {name}")
    assert not missing, missing
