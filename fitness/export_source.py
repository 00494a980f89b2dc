"""Standalone Python source of a family's launch path, for the packages `evo export` writes (they must
not import this project).

`launch_module_source` starts from a few of the family's methods (its `launch`, `geometry`,
`workspace`, ...), follows the names they use to the family's own functions and classes (in
kernels/ and genomes/, by name or through a module alias such as `op.max_parts`), and writes
their source text as it stands, with the module constants they read and small stand-ins for the
few names of this project and numpy a launch path touches (`Launch`, `BufferSpec`, `Case`,
`np.int32` / `np.float32` as ("int32" | "float32", value) pairs, `dtypes.canonical`). So the
packaged launch path is the family's own code, never a hand-kept copy: a family edit reaches the
next export unchanged, and a test comparing the packaged launches with `family.launch` case by
case (tests/test_export_training.py does for the backward) catches a name the stand-ins lack.

A name that cannot be carried (an object that is neither a plain constant nor a function or
class of the project) raises ValueError naming it when it is used, never silently."""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from pathlib import Path
from typing import Any, Callable, Mapping

REPO = Path(__file__).resolve().parent.parent
#: folders whose functions and classes are carried by source (the family's own code)
PROJECT_DIRS = (REPO / "kernels", REPO / "genomes")

#: names the generated module defines itself (stand-ins), never looked up in a family's modules
STANDINS = '''
@dataclass(frozen=True)
class Launch:
    """fitness.family.Launch's fields: one kernel launch."""

    kernel: str
    grid: tuple
    block: tuple
    args: tuple
    shared_bytes: int = 0
    cluster: tuple = (1, 1, 1)
    overlap: bool = False       # a permission: a package that launches in stream order declines it


@dataclass(frozen=True)
class BufferSpec:
    shape: tuple
    dtype: str


class Case:
    """A case's parameters, as fitness.family.Case carries them."""

    def __init__(self, params: Mapping[str, Any], id: str = "") -> None:
        self.params, self.id = dict(params), id


class np:
    """numpy scalars of launch arguments, written as (type, value) pairs."""

    int32 = staticmethod(lambda v: ("int32", int(v)))
    float32 = staticmethod(lambda v: ("float32", float(v)))


class dtypes:
    """The package passes canonical dtype names."""

    canonical = staticmethod(lambda d: str(d))
'''
STANDIN_NAMES = frozenset({"Launch", "BufferSpec", "Case", "np", "dtypes"})
#: names of the generated module's imports (annotations and decorators use them)
IMPORTED = frozenset({"dataclass", "field", "Any", "Mapping", "Sequence", "types"})
_CONSTANT_TYPES = (int, float, str, bytes, tuple, frozenset, dict, list, type(None))


def _in_project(obj: Any) -> bool:
    try:
        path = Path(inspect.getsourcefile(obj) or "").resolve()
    except TypeError:
        return False
    return any(d in path.parents for d in PROJECT_DIRS)


def _constant(value: Any) -> bool:
    """A value whose repr() rebuilds it: numbers, strings, None and containers of them."""
    if isinstance(value, bool):
        return True
    if not isinstance(value, _CONSTANT_TYPES):
        return False
    if isinstance(value, (tuple, frozenset, list)):
        return all(_constant(v) for v in value)
    if isinstance(value, dict):
        return all(_constant(k) and _constant(v) for k, v in value.items())
    return True


def _used_names(src: str) -> list[ast.AST]:
    """Name and attribute-of-name nodes of `src` outside annotations (which are never evaluated)."""
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                      node.args.vararg, node.args.kwarg):
                if a is not None:
                    a.annotation = None
        elif isinstance(node, ast.AnnAssign):
            node.annotation = ast.Constant(None)
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Name, ast.Attribute))]


class _Collector:
    """The project functions, classes and constants reachable from the roots, in first-use order."""

    def __init__(self) -> None:
        self.sources: dict[str, str] = {}          # name -> source text (functions, classes)
        self.constants: dict[str, Any] = {}
        self.aliases: dict[str, dict[str, str]] = {}   # module alias -> {attribute: carried name}

    def add_root(self, obj: Any) -> str:
        src = textwrap.dedent(inspect.getsource(obj))
        self._follow(obj, src)
        return src

    def _carry(self, name: str, value: Any, where: str) -> None:
        if inspect.isfunction(value) or inspect.isclass(value):
            if not _in_project(value):
                raise ValueError(f"{where}: {name} ({value!r}) is not the project's code and has no stand-in")
            src = textwrap.dedent(inspect.getsource(value)).rstrip("\n")
            old = self.sources.get(name)
            if old is not None and old != src:
                raise ValueError(f"{where}: two different definitions named {name!r}")
            if old is None:
                self.sources[name] = src
                self._follow(value, src)
        elif _constant(value):
            if name in self.constants and self.constants[name] != value:
                raise ValueError(f"{where}: two different constants named {name!r}")
            self.constants[name] = value
        else:
            raise ValueError(f"{where}: {name} is a {type(value).__name__}, neither a constant nor project code")

    def _follow(self, obj: Any, src: str) -> None:
        scope = vars(inspect.getmodule(obj))
        where = getattr(obj, "__qualname__", repr(obj))
        tree = ast.parse(src)        # the function's own names (arguments, assignments) are not looked up
        local = {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
        local |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for node in _used_names(src):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                alias = node.value.id
                mod = scope.get(alias)
                if isinstance(mod, types.ModuleType) and alias not in local and alias not in STANDIN_NAMES \
                        and _in_project(mod):
                    self._carry(node.attr, getattr(mod, node.attr), f"{where} ({alias}.{node.attr})")
                    self.aliases.setdefault(alias, {})[node.attr] = node.attr
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                name = node.id
                if name in local or name in STANDIN_NAMES or name in IMPORTED or name not in scope:
                    continue
                value = scope[name]
                if isinstance(value, types.ModuleType):
                    if _in_project(value):
                        continue        # followed through its attributes above
                    raise ValueError(f"{where}: uses the module {name} ({value.__name__}), which the package lacks")
                if name == getattr(obj, "__name__", None) and value is obj:
                    continue
                self._carry(name, value, where)


def launch_module_source(doc: str, methods: Mapping[str, Callable[..., Any]], attrs: Mapping[str, Any],
                         api: str) -> str:
    """A module defining `_Family` (the given methods by their source, `attrs` as class attributes),
    everything those reach in the project, the stand-ins, then `api` (the package's entry points,
    written against `_Family`)."""
    col = _Collector()
    bodies = [textwrap.indent(col.add_root(fn).rstrip("\n"), "    ") for fn in methods.values()]
    for name, value in attrs.items():
        if not _constant(value):
            raise ValueError(f"attribute {name} of the packaged family must be a constant")
    parts = [f'"""{doc}"""', "from __future__ import annotations", "",
             "import types", "from dataclasses import dataclass, field", "from typing import Any, Mapping, Sequence", ""]
    parts += [f"{k} = {v!r}" for k, v in sorted(col.constants.items())]
    parts += ["", STANDINS.rstrip("\n")]
    for src in col.sources.values():
        parts += ["", "", src]
    for alias, names in sorted(col.aliases.items()):
        ns = ", ".join(f"{a}={v}" for a, v in sorted(names.items()))
        parts += ["", "", f"{alias} = types.SimpleNamespace({ns})"]
    head = ['class _Family:', '    """The family\'s launch path: its own methods, by their source."""', ""]
    head += [f"    {k} = {v!r}" for k, v in attrs.items()]
    parts += ["", "", "\n".join(head) + "\n\n" + "\n\n".join(bodies)]
    parts += ["", "", api.strip("\n"), ""]
    return "\n".join(parts)


__all__ = ["launch_module_source", "STANDIN_NAMES"]
