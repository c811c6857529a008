"""The import graph of asct_jax, factor_jax and experiments: no cycle, layers point one way.

Every import in every module counts, function-local ones included. Edges: `import a.b` and
`from a.b import x` -> a.b; `from a import b` -> a.b when a.b is a module, else -> a (its
__init__); relative imports are resolved. So `from asct_jax.envs import make` in
asct_jax/envs/foo.py is an edge to asct_jax.envs, whose __init__ imports foo: a cycle.
Layers, transitively: asct_jax imports neither factor_jax nor experiments, factor_jax not
experiments, asct_jax.envs neither asct_jax.rl nor asct_jax.search, asct_jax.rl not
asct_jax.search (playing on from a state is asct_jax.envs.play's).

Each method package owns its pieces: the substrate (asct_jax/) names no hindsight teacher,
no SERL and no hindsight phase.
"""
import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("asct_jax", "factor_jax", "experiments")


def _modules():
    """Dotted module name -> (path, is_package) for every .py under PACKAGES."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts.pop()
            out[".".join(parts)] = (path, is_pkg)
    return out


def _known(name, modules):
    """`name` or its longest prefix that is one of `modules` (None outside PACKAGES)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def _targets(node, module, is_pkg, modules):
    """The modules an Import / ImportFrom `node` in `module` imports (None: outside)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield _known(alias.name, modules)
        return
    if node.level:
        base = module.split(".")
        base = base[: len(base) - (node.level - 1)] if is_pkg else base[: len(base) - node.level]
        src = ".".join(base + ([node.module] if node.module else []))
    else:
        src = node.module
    for alias in node.names:
        sub = f"{src}.{alias.name}"
        yield sub if sub in modules else _known(src, modules)


def import_graph():
    """Module -> set of modules of PACKAGES it imports (anywhere in its source)."""
    modules = _modules()
    graph = {}
    for module, (path, is_pkg) in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(_targets(node, module, is_pkg, modules))
        graph[module] = edges - {None, module}
    return graph


def _sccs(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):                       # the graph is small: recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while v not in comp:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _shortest_cycle(graph, comp, start):
    """start -> ... -> start within `comp` (breadth first)."""
    prev, queue = {start: None}, [start]
    for v in queue:                     # the queue grows while it is read
        for w in sorted(graph[v] & comp):
            if w == start:
                path = [v]
                while prev[path[0]] is not None:
                    path.insert(0, prev[path[0]])
                return path + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)


def _cycles(graph):
    """Per strongly connected component: one cycle path and the component's modules."""
    return [" -> ".join(_shortest_cycle(graph, comp, min(comp)))
            + f"  (entangled: {', '.join(sorted(comp))})" for comp in _sccs(graph)]


def _reachable(graph, src):
    seen, todo = set(), [src]
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def _inside(module, pkg):
    return module == pkg or module.startswith(pkg + ".")


def test_the_import_graph_has_no_cycle():
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles:\n  " + "\n  ".join(cycles)


def test_layers_point_one_way():
    graph = import_graph()
    rules = [("asct_jax", ("factor_jax", "experiments")), ("factor_jax", ("experiments",)),
             ("asct_jax.envs", ("asct_jax.rl", "asct_jax.search")),
             ("asct_jax.rl", ("asct_jax.search",))]
    bad = []
    for lower, uppers in rules:
        for module in sorted(m for m in graph if _inside(m, lower)):
            for target in sorted(_reachable(graph, module)):
                if any(_inside(target, up) for up in uppers):
                    bad.append(f"{module} -> {target}")
    assert not bad, "imports against the layering (transitive):\n  " + "\n  ".join(bad)


def test_the_scan_sees_local_relative_and_submodule_imports():
    graph = import_graph()
    assert "asct_jax.envs.base" in graph["asct_jax.envs"]          # from pkg import submodule
    assert "asct_jax.envs.household" in graph["asct_jax.envs"]
    assert "asct_jax.envs._common" in graph["asct_jax.envs.toy_tree"]   # function-local
    modules = {"p": None, "p.a": None, "p.b": None, "p.q": None, "p.q.c": None}
    rel = ast.parse("from . import a\nfrom .b import x\nfrom .. import b\nfrom ..q import y")
    got = [list(_targets(n, "p.q.c", False, modules)) for n in rel.body]
    assert got == [["p.q"], ["p.q"], ["p.b"], ["p.q"]]
    got = [list(_targets(n, "p", True, modules))
           for n in ast.parse("from . import a, name\nfrom .q import c").body]
    assert got == [["p.a", "p"], ["p.q.c"]]
    make = ast.parse("from p import make").body[0]         # a name of p: p's __init__
    assert list(_targets(make, "p.a", False, modules)) == ["p"]
    toy = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set(), "e": {"e2"}, "e2": {"e"}}
    assert _cycles(toy) == ["a -> b -> c -> a  (entangled: a, b, c)",
                              "e -> e2 -> e  (entangled: e, e2)"]


# asct_jax/ says "teacher", "hindsight" or "serl" (any case) nowhere: the warm start's
# fields that did (warm_start.teacher, .hindsight, .hindsight_steps) are warm_start
# .imitated, .phase, .phase_steps since issue 50; stored configs keep the old names
# (experiments/harness/stored_fields.RENAMED_FIELDS).
_METHOD_WORDS = re.compile(r"teacher|hindsight|serl", re.IGNORECASE)


def substrate_method_words():
    """['path:line: text'] of every line under asct_jax/ that says teacher, hindsight or
    serl (any case; `grep -rni "teacher\\|hindsight\\|serl" asct_jax/`)."""
    out = []
    for path in sorted((ROOT / "asct_jax").rglob("*")):
        if not path.is_file() or path.suffix not in (".py", ".md", ".txt", ".json", ""):
            continue
        rel = path.relative_to(ROOT).as_posix()
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if _METHOD_WORDS.search(line):
                out.append(f"{rel}:{i}: {line.strip()}")
    return out


def test_the_substrate_imports_no_method_package():
    graph = import_graph()
    bad = sorted(f"{m} -> {t}" for m in graph if _inside(m, "asct_jax")
                 for t in graph[m] if _inside(t, "factor_jax") or _inside(t, "experiments"))
    assert not bad, "asct_jax imports a method package:\n  " + "\n  ".join(bad)


def test_the_substrate_names_no_hindsight_teacher():
    """FACTOR's and SERL's hindsight teacher and its warm-start phase live in
    factor_jax.hindsight; environments expose only the neutral feedback frame."""
    found = substrate_method_words()
    assert not found, "asct_jax/ names a method's teacher:\n  " + "\n  ".join(found)
