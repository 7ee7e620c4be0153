"""The order ``make test``'s workers take the test files in (``tests/conftest.py``): costliest first by
``tests/durations.json``, which names only files that exist, and the Makefile keeps that order for xdist."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

from tests import conftest

ROOT = Path(__file__).resolve().parents[1]


def test_the_cost_file_names_files_that_exist():
    cost = json.loads(conftest.DURATIONS.read_text(encoding="utf-8"))
    missing = [k for k in cost if not (ROOT / k).exists()]
    assert not missing, f"{conftest.DURATIONS.name} names files that are gone (rewrite it: pytest --store-durations): {missing}"
    assert all(isinstance(v, (int, float)) and v >= 0 for v in cost.values())


def _items(*nodeids: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_a_worker_takes_the_costliest_files_first_and_keeps_each_files_tests_together(monkeypatch, tmp_path):
    costs = tmp_path / "durations.json"
    costs.write_text(json.dumps({"tests/test_b.py": 50.0, "tests/test_c.py": 5.0}), encoding="utf-8")
    monkeypatch.setattr(conftest, "DURATIONS", costs)
    ids = ["tests/test_a.py::t1", "tests/test_a.py::t2", "tests/test_b.py::t1", "tests/test_b.py::t2",
           "tests/test_c.py::t1", "workbench/x.py::workbench.x.f"]
    worker = SimpleNamespace(workerinput={"workerid": "gw0"})
    items = _items(*ids)
    conftest.pytest_collection_modifyitems(worker, items)
    assert [i.nodeid for i in items] == [ids[2], ids[3], ids[4], ids[0], ids[1], ids[5]]  # unknown files keep their order
    plain = _items(*ids)
    conftest.pytest_collection_modifyitems(SimpleNamespace(), plain)  # not a worker: pytest's order
    assert [i.nodeid for i in plain] == ids
    costs.write_text("{not json", encoding="utf-8")
    broken = _items(*ids)
    conftest.pytest_collection_modifyitems(worker, broken)  # a broken cost file loses only the ordering
    assert [i.nodeid for i in broken] == ids


def test_make_test_keeps_the_order_the_workers_collected():
    lines = re.search(r"^test:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M).group(1)
    recipe = next(line for line in lines.splitlines() if "pytest" in line)
    assert "--dist loadfile" in recipe and "--no-loadscope-reorder" in recipe, recipe
