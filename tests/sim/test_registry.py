"""sim.registry: a registered module that is not written yet is one line; a broken one is not hidden."""

from __future__ import annotations

import pytest

from hwmodels.errors import HetSpecError
from sim.registry import import_registered


def test_imports_a_registered_module():
    assert import_registered("sim.tree", "tree").__name__ == "sim.tree"


def test_a_missing_module_is_one_line_naming_its_path():
    with pytest.raises(HetSpecError) as err:
        import_registered("sim.strategies.no_such_module", "method beam has no simulator strategy")
    assert str(err.value) == "method beam has no simulator strategy yet (sim/strategies/no_such_module.py)"


def test_an_import_error_inside_an_existing_module_propagates(tmp_path, monkeypatch):
    (tmp_path / "broken_entry.py").write_text("import no_such_dependency_of_hetspec\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_of_hetspec"):
        import_registered("broken_entry", "entry")
