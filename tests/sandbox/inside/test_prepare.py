"""Preparing a case server's program, in process: what it imports and what it runs first.

With real workers, cases are compared with fresh runs in ``tests/engine/test_cases.py``.
"""

from __future__ import annotations

import builtins
import json
import math
import os
import sys
import types
import warnings
from collections.abc import Iterator

import pytest

from corral.sandbox.inside import _prepare


def _preimport(code: str) -> None:
    tree = _prepare._parsed(code)
    if tree is not None:
        _prepare._preimport(tree)


def _leading(code: str, namespace: dict[str, object]) -> _prepare.Leading:
    tree = _prepare._parsed(code)
    return NONE_RUN if tree is None else _prepare._run_leading_imports(tree, namespace)


NONE_RUN: _prepare.Leading = (frozenset(), ())

WARNS = "tests.sandbox.inside.warns_on_import"


@pytest.fixture
def forget() -> Iterator[None]:
    """Modules the test imports are dropped again afterwards."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.mark.usefixtures("forget")
def test_preimport_takes_standard_library_imports_at_top_level() -> None:
    for name in ("colorsys", "wave", "this", "sched"):
        sys.modules.pop(name, None)
    _preimport(
        "import colorsys\nfrom wave import open as wopen\nimport this\n"
        "def f():\n    import sched\n"
        "import surely_not_a_module_anywhere\n"
    )
    assert "colorsys" in sys.modules
    assert "wave" in sys.modules
    assert "this" not in sys.modules  # it prints when imported: each case does it itself
    assert "sched" not in sys.modules  # not at top level
    assert "surely_not_a_module_anywhere" not in sys.modules


@pytest.mark.usefixtures("forget")
def test_preimport_drops_a_module_that_warns_as_it_is_imported() -> None:
    sys.modules.pop(WARNS, None)
    _preimport(f"import {WARNS}\n")
    assert WARNS not in sys.modules  # each case imports it, and sees the warning


def test_preimport_ignores_code_that_does_not_compile() -> None:
    _preimport("import (\n")


def test_leading_imports_of_loaded_modules_run_in_the_namespace() -> None:
    namespace: dict[str, object] = {"__name__": "__main__", "__builtins__": builtins}
    run, rebindings = _leading(
        "import os.path\nfrom math import *\nimport json as j\nx = 1\nimport re\n", namespace
    )
    assert run == {0, 1, 2}  # up to the first statement that is not such an import
    assert rebindings == ()
    assert namespace["os"] is os
    assert namespace["pi"] == math.pi
    assert namespace["j"] is json
    assert "x" not in namespace
    assert "re" not in namespace


@pytest.mark.parametrize(
    "code",
    [
        pytest.param('"""doc"""\nimport os\n', id="a docstring first"),
        pytest.param("from __future__ import annotations\nimport os\n", id="a future import"),
        pytest.param("import surely_not_a_module_anywhere\n", id="a module not loaded"),
        pytest.param("import this\n", id="a module that prints"),
        pytest.param("from .sibling import x\n", id="a relative import"),
        pytest.param("import (\n", id="code that does not parse"),
        pytest.param("from sys import stdin\n", id="what each run sets afresh in sys"),
        pytest.param("from builtins import *\n", id="what each run sets afresh in builtins"),
    ],
)
def test_leading_imports_that_are_not_of_loaded_modules_are_left_to_the_cases(
    code: str,
) -> None:
    sys.modules.pop("this", None)
    namespace: dict[str, object] = {}
    assert _leading(code, namespace) == NONE_RUN
    assert namespace == {}


@pytest.fixture
def exporter() -> Iterator[types.ModuleType]:
    """A loaded module whose star import binds names the run itself sets, or warns."""
    module = types.ModuleType("corral_test_exporter")
    module.input_files = "bound by the import"  # type: ignore[attr-defined]
    module.__all__ = ["input_files"]  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_leading_imports_that_bind_a_name_the_run_sets_are_left_to_the_cases(
    exporter: types.ModuleType,
) -> None:
    namespace: dict[str, object] = {"kept": 1}
    code = f"import os\nfrom {exporter.__name__} import *\n"
    assert _leading(code, namespace) == NONE_RUN
    assert namespace == {"kept": 1}  # the import of os is undone too


def test_what_each_run_sets_afresh_is_noted_for_each_case_to_bind_again() -> None:
    namespace: dict[str, object] = {"__builtins__": builtins}
    code = "from sys import stdin, argv as arguments\nimport json\nfrom builtins import *\n"
    run, rebindings = _leading(code, namespace)
    assert run == {0, 1, 2}
    assert namespace["stdin"] is sys.stdin
    assert namespace["json"] is json
    assert {(m.__name__, attribute, name) for m, attribute, name, _ in rebindings} == {
        ("sys", "stdin", "stdin"),
        ("sys", "argv", "arguments"),
        ("builtins", "input", "input"),
    }
    assert {name for _, _, name, _ in rebindings} <= set(namespace)


def test_a_case_binds_again_only_what_its_run_changed_and_no_later_import_rebound() -> None:
    module = types.ModuleType("corral_test_run_state")
    server, later = object(), object()
    for attribute in ("changed", "kept", "removed", "overridden"):
        setattr(module, attribute, server)
    namespace: dict[str, object] = {"a": server, "b": server, "c": server, "d": later}
    rebindings = tuple(
        (module, attribute, name, server)
        for attribute, name in (
            ("changed", "a"),
            ("kept", "b"),
            ("removed", "c"),
            ("overridden", "d"),
        )
    )
    case = object()
    module.changed = module.overridden = case  # type: ignore[attr-defined]
    delattr(module, "removed")
    _prepare.rebind_run_values(rebindings, namespace)
    assert namespace == {"a": case, "b": server, "d": later}


def test_a_name_a_loaded_module_does_not_hold_yet_is_left_to_the_cases(
    exporter: types.ModuleType,
) -> None:
    # ``from package import submodule`` would import it (and run its code) in the server.
    namespace: dict[str, object] = {}
    code = f"from {exporter.__name__} import not_imported_yet\n"
    assert _leading(code, namespace) == NONE_RUN
    exporter.__all__ = ["input_files", "not_imported_yet"]  # type: ignore[attr-defined]
    code = f"from {exporter.__name__} import *\n"
    assert _leading(code, namespace) == NONE_RUN
    assert namespace == {}


def test_leading_imports_that_fail_or_warn_are_undone(exporter: types.ModuleType) -> None:
    def warns(name: str) -> object:
        warnings.warn(f"{name} is deprecated", DeprecationWarning, stacklevel=2)
        return 1

    setattr(exporter, "__getattr__", warns)  # noqa: B010 - a module-level __getattr__
    for code in (
        "import os\nfrom math import no_such_name\n",
        f"from {exporter.__name__} import old\n",
    ):
        namespace: dict[str, object] = {}
        assert _leading(code, namespace) == NONE_RUN
        assert namespace == {}
