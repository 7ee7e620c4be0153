"""``workbench export verifiers --method M --out DIR``: a method as an installable ``verifiers`` 0.4.0 environment.

``DIR`` becomes a package directory (what ``vf-init`` scaffolds, for one method)::

    DIR/pyproject.toml                 name workbench-<method>; dependencies verifiers==0.4.0 and workbench
    DIR/README.md                      how to install and evaluate it
    DIR/workbench_<method>/__init__.py  exports the taskset and harness classes (verifiers resolves them by the
                                        package name: ``vf-eval workbench-<method>``) and load_environment(**kwargs)
    DIR/workbench_<method>/export.json  the manifest: method, corpus, turn limits, the rubric's weights
    DIR/workbench_<method>/tasks.jsonl  the exported questions, one workbench Example a line

The environment itself is :mod:`workbench.integrations.verifiers.environment` (the protocol's turns, its tools
over the corpus, the method's rubric); the package only names an export of it, so the package needs ``workbench``
importable beside ``verifiers``: ``make verifiers-env`` installs both (this repository with ``pip install
--no-deps -e .``), and ``pip install -e DIR`` (or ``DIR`` on ``PYTHONPATH``) adds the package.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from workbench.protocols.base import Protocol

VERIFIERS_VERSION = "0.4.0"
MANIFEST_KEYS = ("method", "corpus", "max_turns", "max_new_tokens", "weights")


def package_name(method: str) -> str:
    """The Python package an export of ``method`` is (``workbench_search_r1``); verifiers' id is the dashed form."""
    return "workbench_" + re.sub(r"[^0-9a-z_]", "_", method.lower())


def chat_protocol(method: str) -> Protocol:
    """``method``'s protocol as the exported environment runs it: observations as user turns (the protocol's
    ``observation_mode="chat"``, as ``workbench train`` rolls out), since a chat endpoint takes whole turns."""
    from workbench.methods import get_method

    return get_method(method).training_protocol()


def read_manifest(path: Path) -> dict[str, Any]:
    """An export's ``export.json``, checked: each problem is one line naming the file and the fix."""
    from workbench.util.io import read_json

    fix = "write the export again with `workbench export verifiers`"
    try:
        m = read_json(path, 1 << 20, "verifiers export manifest")
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: {e}; {fix}") from None
    if not isinstance(m, dict) or any(k not in m for k in MANIFEST_KEYS):
        raise ValueError(f"{path}: not the manifest of a verifiers export (it needs {', '.join(MANIFEST_KEYS)}); {fix}")
    if not isinstance(m["weights"], dict) or not all(isinstance(v, (int, float)) for v in m["weights"].values()):
        raise ValueError(f"{path}: weights must map component names to numbers; {fix}")
    for k in ("max_turns", "max_new_tokens"):
        if not isinstance(m[k], int) or isinstance(m[k], bool) or m[k] < 1:
            raise ValueError(f"{path}: {k} must be an integer >= 1, got {m[k]!r}; {fix}")
    return m


def _pyproject(dist: str, package: str, method: str) -> str:
    return f'''[project]
name = "{dist}"
version = "0.1.0"
description = "The workbench method {method} as a verifiers environment (its protocol, tools and rubric)."
requires-python = ">=3.11"
# workbench itself: install this repository beside it (make verifiers-env: pip install --no-deps -e .)
dependencies = ["verifiers=={VERIFIERS_VERSION}"]

[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
packages = ["{package}"]

[tool.setuptools.package-data]
{package} = ["export.json", "tasks.jsonl"]
'''


def _init(package: str, method: str) -> str:
    return f'''"""The workbench method {method!r} as a verifiers environment (written by `workbench export verifiers`).

verifiers resolves the taskset, the harness and the env below by this package's name (`vf-eval {package}`);
`load_environment(**kwargs)` returns the environment for a config of its own (kwargs: verifiers' EnvConfig fields).
"""

from pathlib import Path

from workbench.integrations.verifiers import environment

_BUILT = environment.build(Path(__file__).resolve().parent, "{package}")
WorkbenchTaskset = _BUILT["taskset"]
WorkbenchHarness = _BUILT["harness"]
WorkbenchEnv = _BUILT["env"]
load_environment = _BUILT["load_environment"]

__all__ = ["WorkbenchTaskset", "WorkbenchHarness", "WorkbenchEnv", "load_environment"]
'''


def _readme(dist: str, package: str, method: str, corpus: str, n: int) -> str:
    return f"""# {dist}

The workbench method `{method}` as a [verifiers](https://pypi.org/project/verifiers/) {VERIFIERS_VERSION}
environment: {n} questions, the protocol's tags and search tool over the corpus `{corpus}`, and the method's
rubric (one reward per weighted component, with its weight; weight-0 components as metrics).

```bash
make verifiers-env                                     # in the workbench repository: .venv-verifiers
.venv-verifiers/bin/pip install --no-deps -e .         # this package (or put this folder on PYTHONPATH)
.venv/bin/python -m workbench.rollout.server --port 8000 &   # or any OpenAI-compatible server
OPENAI_API_KEY=EMPTY .venv-verifiers/bin/vf-eval {package} --model <served model> \\
    --client.base-url http://127.0.0.1:8000/v1 --client.api-key-var OPENAI_API_KEY -n 2 --no-push
workbench import verifiers outputs/                    # the traces as a workbench run
```
"""


def export_verifiers(method: str, out: str | Path, *, dataset: str = "world", split: str | None = None,
                     limit: int | None = None, corpus: str = "world", max_turns: int | None = None,
                     max_new_tokens: int | None = None) -> dict[str, Path]:
    """Write ``method``'s verifiers environment into ``out``; returns ``{what: path}``. The questions are
    ``dataset``'s (``world``: its ``split``, by default ``dev``), the first ``limit`` of them."""
    from workbench.integrations.verl.export import dataset_examples
    from workbench.methods import get_method
    from workbench.rollout.engine import RolloutConfig

    m = get_method(method)
    if m.reward is None:
        raise ValueError(f"method {method!r} declares no reward preset, so there is no rubric to export: pick a "
                         "method with one (`workbench methods`)")
    if limit is not None and limit < 1:
        raise ValueError(f"--limit {limit}: must be >= 1 (the first N questions; default: all)")
    chat_protocol(m.name)  # the protocol builds in chat mode (raises here, not in verifiers' process)
    if str(dataset).lower() == "world":
        from workbench.data.world import load_world

        examples = load_world().split(split or "dev")
        examples = examples[:limit] if limit else examples
    else:
        examples, _, _ = dataset_examples(dataset, split, limit)
    if not examples:
        raise ValueError(f"dataset {dataset!r} (split {split or 'all'}) has no questions to export")
    defaults = RolloutConfig()
    turns = int(max_turns or m.train.get("max_turns") or defaults.max_turns)
    tokens = int(max_new_tokens or m.train.get("max_new_tokens") or defaults.max_new_tokens)
    for flag, v in (("--max-turns", turns), ("--max-new-tokens", tokens)):
        if v < 1:
            raise ValueError(f"{flag} {v}: must be >= 1")
    package = package_name(m.name)
    dist = package.replace("_", "-")
    root = Path(out)
    pkg = root / package
    pkg.mkdir(parents=True, exist_ok=True)
    others = [p.name for p in root.glob("workbench_*") if p.is_dir() and p.name != package]
    if others:
        raise ValueError(f"--out {root}: it holds the export {others[0]} of another method; give each export a "
                         f"folder of its own (e.g. exports/verifiers-{m.name})")
    manifest = {"method": m.name, "corpus": str(corpus), "dataset": str(dataset), "split": split, "limit": limit,
                "max_turns": turns, "max_new_tokens": tokens, "weights": dict(m.rubric().weights),
                "reward": m.reward.name, "verifiers": VERIFIERS_VERSION, "n_questions": len(examples)}
    files = {
        "pyproject": (root / "pyproject.toml", _pyproject(dist, package, m.name)),
        "readme": (root / "README.md", _readme(dist, package, m.name, str(corpus), len(examples))),
        "package": (pkg / "__init__.py", _init(package, m.name)),
        "manifest": (pkg / "export.json", json.dumps(manifest, indent=1) + "\n"),
        "tasks": (pkg / "tasks.jsonl", "".join(json.dumps(ex.to_dict(), ensure_ascii=False) + "\n"
                                                for ex in examples)),
    }
    for path, text in files.values():
        path.write_text(text, encoding="utf-8")
    return {k: p for k, (p, _) in files.items()}
