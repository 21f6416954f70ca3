"""The package's shape, checked from its source (no imports run): the layers import only downwards,
nothing imports in a cycle, function-local imports are only the optional heavy dependencies, and no
module or function outgrows one sitting. See docs/ARCHITECTURE.md."""

from __future__ import annotations

import ast
import pathlib

PKG = "specstream_core"
ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / PKG

# layer -> the layers it may import (besides itself and `errors`); nothing in the package imports the
# lab (`app`), and only `cli` (and the package's `__main__`) imports `cli`
# `kernels` (the CPU kernel layer) imports nothing of the method but the transformers glue (KERNEL_MAY_USE);
# `backends` (what runs the method on a machine) imports the kernels and, of `model`, only BACKEND_MAY_USE; the
# method (`model`, `decoding`) reaches the kernels only through `backends`
ALLOWED = {
    "kernels": set(),
    "backends": {"kernels", "model"},
    "model": {"backends"},
    "decoding": {"model", "backends"},
    "io": {"model", "decoding", "backends"},
    "tasks": set(),
    "training": {"backends", "model", "decoding", "tasks"},
    "bench": {"kernels", "backends", "model", "decoding", "training", "tasks"},
    "cli": {"kernels", "backends", "model", "decoding", "io", "tasks", "training", "bench"},
}
KERNEL_MAY_USE = {f"{PKG}.model.compat"}
# the transformers glue, the method's data structures (masks, the KV cache) and the precision names
BACKEND_MAY_USE = {f"{PKG}.model.{m}" for m in ("compat", "masks", "cache", "precisions")}
BASE = ("errors", "paths")  # what every layer may import
ENGINE = ("kernels", "backends", "model", "decoding")  # what `Engine` is made of: no edge to bench, training, io, cli or app

# Function-local imports are allowed only for optional or heavy third-party dependencies, loaded
# when a code path needs them (the reason each is deferred):
OPTIONAL = {
    "transformers": "model construction only (hf baselines, tokenizers); importing it costs seconds",
    "peft": "shared-mode LoRA only",
    "accelerate": "training only, optional",
    "bitsandbytes": "nf4 loading only, optional (GPU/CPU quantization)",
    "plotly": "figures only (bench plots); never needed to decode",
    "tqdm": "progress bars only",
    "resource": "POSIX only (sandbox limits when scoring code)",
    "huggingface_hub": "hub ids only: a local stream directory never touches it",
    "torch.distributed": "generate-batch under accelerate launch / torchrun only",
    "gguf": "reading a GGUF file's own 4-bit groups (int4 on the default model) only",
    "llama_cpp": "the llama.cpp peer of `speed` only, optional (builds from source)",
}
# cli commands defer their machinery to `run()`: building the parser (`--help`) must not load torch
LAZY_LAYERS = {"cli"}

MAX_MODULE_LINES = 400
# the decoding loop and the engine read like the method: machinery belongs in the backend
MODULE_LIMITS = {f"{PKG}/decoding/engine.py": 220, f"{PKG}/decoding/loop.py": 330}
PRECISIONS = ("fp32", "bf16", "fp16", "int4", "int4-a8", "nf4", "int8")
MAX_FUNCTION_LINES = 60
# functions longer than MAX_FUNCTION_LINES must say why in a comment within their first lines
# containing "long:"; modules may not exceed MAX_MODULE_LINES at all unless listed here with a reason
MODULE_ALLOW: dict[str, str] = {}


def modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def imports(path: pathlib.Path, module: str, mods: dict) -> list[tuple[str, int, bool]]:
    """(imported module, line, function-local) for every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text())
    local_lines = {n.lineno for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, node.lineno in local_lines) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                out.append((full if full in mods else base, node.lineno, node.lineno in local_lines))
    return out


def graph():
    mods = modules()
    return mods, {m: imports(p, m, mods) for m, p in mods.items()}


def test_layers_import_only_downwards():
    mods, edges = graph()
    bad = []
    for m, deps in edges.items():
        own = layer(m)
        if own is None or own in BASE or m == f"{PKG}.__main__":
            continue
        for dep, line, _ in deps:
            if dep.startswith("app") or (dep.startswith(PKG + ".cli") and own != "cli"):
                bad.append(f"{m}:{line} -> {dep}")
            if not dep.startswith(PKG + "."):
                continue
            target = layer(dep)
            if own == "kernels" and dep in KERNEL_MAY_USE:
                continue
            if own == "backends" and target == "model" and dep not in BACKEND_MAY_USE:
                bad.append(f"{m}:{line} -> {dep} (a backend uses only the model's glue and data structures)")
            if target not in (own, *BASE) and target not in ALLOWED[own]:
                bad.append(f"{m}:{line} -> {dep}")
            if own in ENGINE and target not in (*ENGINE, *BASE):
                bad.append(f"{m}:{line} -> {dep} (the engine)")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_commands_do_not_import_each_other():
    _, edges = graph()
    bad = [f"{m}:{line} -> {dep}" for m, deps in edges.items() if m.startswith(PKG + ".cli.commands.")
           for dep, line, _ in deps if dep.startswith(PKG + ".cli.commands.")]
    assert not bad, "a command imports another (shared helpers belong in cli/args.py):\n" + "\n".join(bad)


def test_no_import_cycles():
    mods, edges = graph()
    adj = {m: sorted({d for d, _, _ in deps if d in mods and d != m}) for m, deps in edges.items()}
    # a package's __init__ importing its own submodules is how packages re-export: not a cycle edge
    # back into the package from those submodules unless they import the package itself
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in adj:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_function_local_imports_have_a_reason():
    _, edges = graph()
    bad = []
    for m, deps in edges.items():
        if layer(m) in LAZY_LAYERS:
            continue
        for dep, line, local in deps:
            if local and not any(dep == name or dep.startswith(name + ".") for name in OPTIONAL):
                bad.append(f"{m}:{line} imports {dep} inside a function")
    assert not bad, "function-local imports without a stated reason (see OPTIONAL):\n" + "\n".join(bad)


def test_plotly_stays_out_of_the_core():
    _, edges = graph()
    users = sorted({m for m, deps in edges.items() for dep, _, _ in deps if dep.split(".")[0] == "plotly"})
    assert set(users) <= {f"{PKG}.bench.plots"}, users


def test_modules_and_functions_stay_small():
    too_long, functions = [], []
    for path in list(SRC.rglob("*.py")) + list((ROOT / "app").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        lines = path.read_text().splitlines()
        if len(lines) > MAX_MODULE_LINES and rel not in MODULE_ALLOW:
            too_long.append(f"{rel}: {len(lines)} lines")
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                head = "\n".join(lines[node.lineno - 1:node.lineno + 5])
                if n > MAX_FUNCTION_LINES and "long:" not in head:
                    functions.append(f"{rel}:{node.lineno} {node.name}: {n} lines")
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(too_long)
    assert not functions, (f"functions over {MAX_FUNCTION_LINES} lines without a 'long:' comment saying why:\n"
                           + "\n".join(functions))


def test_the_engine_and_the_loop_stay_small():
    over = [f"{rel}: {len((ROOT / rel).read_text().splitlines())} lines > {limit}" for rel, limit in MODULE_LIMITS.items()
            if len((ROOT / rel).read_text().splitlines()) > limit]
    assert not over, "\n".join(over)


def precision_conditions(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every precision name (a string, or a name such as INT4 or INT4_A8) in a condition: an `if`,
    `while`, ternary, `assert` or comprehension test, or any boolean operation or comparison."""
    tests = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            tests.append(node.test)
        elif isinstance(node, ast.comprehension):
            tests += node.ifs
        elif isinstance(node, (ast.BoolOp, ast.Compare)):
            tests.append(node)
    found = set()
    for test in tests:
        for n in ast.walk(test):
            text = (n.value if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    else n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None)
            if text is not None and text.lower().replace("_", "-") in PRECISIONS:
                found.add((n.lineno, text))
    return sorted(found)


def test_the_engine_and_the_loop_make_no_precision_choice():
    """Which precision runs is the backend's business (`specstream_core/backends/`), never a branch of the method."""
    bad = [f"{rel}:{line} {name}" for rel in MODULE_LIMITS
           for line, name in precision_conditions(ast.parse((ROOT / rel).read_text()))]
    assert not bad, "precision names in conditions:\n" + "\n".join(bad)


def test_the_precision_check_can_fail():
    for source in ('if precision in INT4:\n    pass', 'x = 1 if p == "bf16" else 2', 'ok = a and p != "int4-a8"',
                   'while kind is not INT4_A8:\n    pass'):
        assert precision_conditions(ast.parse(source)), source
    assert not precision_conditions(ast.parse('label = "fp32"\nf(precision="int4")'))


def test_test_modules_share_helpers_not_each_other():
    """Tests share helpers through tests/helpers.py, tiny_models.py, hostile.py and conftest.py's fixtures;
    no test module imports another (its fixtures would run twice and F811 would have to be silenced)."""
    tests = ROOT / "tests"
    test_modules = {p.stem for p in tests.glob("test_*.py")} | {"conftest"}
    bad = []
    for path in sorted(tests.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.removeprefix("tests.").split(".")[0] in test_modules:
                    bad.append(f"tests/{path.name}:{node.lineno} imports {name}")
    assert not bad, "test modules importing other test modules (move the helper to tests/helpers.py):\n" + "\n".join(bad)


def test_scripts_use_no_private_state():
    """scripts/ drives the package through its public names: no `_private` import or attribute of it."""
    bad = []
    for path in sorted((ROOT / "scripts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PKG):
                bad += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names if a.name.startswith("_")]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                bad.append(f"{path.name}:{node.lineno} uses .{node.attr}")
    assert not bad, "scripts touching private state:\n" + "\n".join(bad)
