"""experiments/ laid out by use (issue 50): entry points in tables/, studies/, bench/,
checks/ and harness/, only reproduce.py and train.py at the top; every module at most 500
lines; no sys.path edits; every `python -m experiments.X` the README, experiments/README.md
and the docs name is a module that exists. One command line for every script (config_cli;
no argparse): a script outside tables/ with options of its own defaults to its config,
experiments/configs/<folder>/<module>.py, and an unknown field exits 2 with one line.
Static (nothing is imported but find_spec's parents) but for those few subprocesses."""
import ast
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

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


def test_no_module_imports_argparse():
    found = []
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) else [])
            if "argparse" in names:
                found.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


def _default_config(path: pathlib.Path):
    """The CONFIG string a script's run_main gets as its default, or None."""
    tree = ast.parse(path.read_text(), str(path))
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "CONFIG"):
            return node.value.value
    return None


def test_every_script_runs_through_config_cli_with_its_config():
    """Each `__main__` block calls config_cli.run_main; one with options of its own (not a
    run config: run_main's default=CONFIG) defaults to experiments/configs/<its folder>/<its
    name>.py, which exists."""
    wrong = []
    for p in _modules():
        text = p.read_text()
        if 'if __name__ == "__main__":' not in text or "configs" in p.parts:
            continue
        main = text[text.index('if __name__ == "__main__":'):]
        if "config_cli.run_main(" not in main:
            wrong.append(f"{p.relative_to(ROOT)}: no config_cli.run_main")
            continue
        if "default=CONFIG" not in main:
            continue   # a run config: the tables, train, warm_start, the config studies
        rel = p.relative_to(EXPERIMENTS)
        want = "experiments/configs/" + str(rel)
        if _default_config(p) != want or not (ROOT / want).exists():
            wrong.append(f"{p.relative_to(ROOT)}: CONFIG {_default_config(p)!r}, want {want}")
    assert not wrong, wrong


def _literal(path: pathlib.Path, name: str):
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return ast.literal_eval(node.value)
    raise KeyError(name)


def test_the_compile_config_names_every_variant():
    """experiments/configs/bench/compile.py spells the variants out (an `against` child
    loads it beside another revision's package): the same as the script's VARIANTS."""
    variants = _literal(EXPERIMENTS / "bench" / "compile.py", "VARIANTS")
    assert _literal(EXPERIMENTS / "configs" / "bench" / "compile.py", "VARIANTS") == ",".join(
        variants)


@pytest.mark.parametrize("module", ["experiments.checks.identity_check",
                                    "experiments.harness.warm_start_artifacts",
                                    "experiments.checks.page_verdicts"])
def test_an_unknown_field_exits_2_with_one_line(module):
    p = subprocess.run([sys.executable, "-m", module, "--config.no_such_field=1"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("config error: no_such_field: unknown field; allowed: "), p.stderr
