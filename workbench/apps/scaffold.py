"""``workbench methods new NAME``: a new method as one package and its test, ready to be made the paper's.

It writes ``workbench/methods/<name>/`` (``__init__.py`` with the declaration, ``reward.py`` with a two-term reward
preset named after the method) and ``tests/test_<name>.py`` (the declaration resolves, the reward by hand, a scripted
rollout scored end to end, a two-step training run on the random-init model). The new method starts from Search-R1's
protocol and expert turns, so it runs at once; each part is then replaced with the paper's. No other file changes:
``workbench methods`` lists it and ``make test`` tests it.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

NAME = re.compile(r"[a-z][a-z0-9_]{1,39}")

INIT = '''"""{title} ({citation}): {summary}

Everything of the method is in this package (``docs/architecture.md``, "How to add a method"). It starts from
Search-R1's protocol and expert turns and a two-term reward (``reward.py``): replace each part with the paper's, and
say in ``notes`` where each value comes from.
"""

from workbench.methods.base import Method
from workbench.methods.{name} import reward
from workbench.methods.search_r1 import expert as search_r1_expert
from workbench.methods.search_r1.protocol import SearchR1

METHOD = Method(
    name="{name}",
    title="{title}",
    citation="{citation}",
    source="{source}",
    protocol=SearchR1,
    reward=reward.PRESET,
    expert=search_r1_expert.WRITER,
    optimizer="grpo",
    paper={{}},
    notes={{"protocol": "Search-R1's grammar (Jin et al., 2025), until the paper's is written",
           "reward": "cover-EM of the answer plus a format term, until the paper's is written",
           "optimizer": "GRPO, until the paper's is declared"}},
)

METHODS = (METHOD,)
'''

REWARD = '''"""{title}: the reward preset ``{name}`` (cover-EM of the answer, plus a format term)."""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.rewards.preset import RewardPreset
from workbench.rewards.rubric import Columns, Rubric, in_range, is_true, nan_where, params


def r_answer(c: Columns) -> np.ndarray:
    """Cover-EM of the answer (1 when a gold answer appears in it; 0 without an answer)."""
    return c["cem"]


@params(penalty=in_range(0, None, description="what a malformed response costs"))
def r_format(c: Columns, *, penalty: float = 1.0) -> np.ndarray:
    """``0`` when the response keeps the protocol's format, ``-penalty`` when it does not."""
    fmt = c["format_ok"]
    return nan_where(is_true(fmt), 0.0, -penalty, fmt)


def {name}(**kw: Any) -> Rubric:
    """{title}: ``r_answer + r_format``. Needs ``cem`` and ``format_ok``."""
    return Rubric([r_answer, r_format], [1, 1], kw, name="{name}", doc={name}.__doc__ or "")


PRESET = RewardPreset("{name}", {name})
'''

TEST = '''"""{name}: the declaration resolves to its own package, the reward by hand, a scripted rollout scored end to end and
two training steps (made by ``workbench methods new``; extend it as the method becomes the paper's)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from workbench import methods as wm
from workbench.core.types import Hit
from workbench.methods import get_method, get_preset
from workbench.rollout.backends.scripted import ScriptedBackend
from workbench.rollout.engine import RolloutConfig, rollout
from workbench.tools.base import Toolbox


def _search(query: str, k: int = 3):
    return [Hit("p1", "Oda Fennick", "Oda Fennick (born 1894) founded the club.")][:k]


def test_listed_with_the_objects_of_its_own_package():
    m = get_method("{name}")
    assert m is wm.METHODS["{name}"] and m.reward.name == "{name}" and m.optimizer == "grpo"
    assert m.reward.build.__module__ == "workbench.methods.{name}.reward"
    assert m.tools == ("search",)


def test_reward_by_hand():
    feats = pd.DataFrame({{"cem": [1.0, 0.0, 1.0], "format_ok": [1.0, 1.0, 0.0]}})
    assert get_preset("{name}")(feats).total.tolist() == [1.0, 0.0, 0.0]
    assert get_preset("{name}", penalty=2.0)(feats).total.tolist()[2] == -1.0


def test_reward_missing_inputs_stay_missing():
    t = get_preset("{name}")(pd.DataFrame({{"cem": [np.nan], "format_ok": [1.0]}}))
    assert math.isnan(t.total[0])


def test_a_scripted_rollout_is_scored(tokenizer, world):
    from workbench.rewards.features import compute_features

    ex = world.split("dev")[0]
    proto = get_method("{name}").get_protocol()
    be = ScriptedBackend(tokenizer, ["<search> founder </search>", f"<answer> {{ex.answers[0]}} </answer>"])
    (t,) = rollout([ex], proto, Toolbox({{"search": _search}}, timeout_s=None), be, RolloutConfig(max_turns=3),
                   progress=False)
    assert t.n_searches == 1 and t.answer == ex.answers[0]
    feats = compute_features([t], [ex], encoder=False, cache=False)
    assert get_preset("{name}")(feats).total.tolist() == [1.0 if t.flags["format_ok"] else 0.0]


@pytest.mark.slow
def test_two_step_training_smoke(tmp_path, one_thread, tiny_model):
    """The method's training declaration runs two steps (on the random-init model of the default architecture:
    the mechanics, not what the real model learns)."""
    cfg = wm.get_method("{name}").train_config(steps=2, questions_per_step=2, group_size=2, max_turns=2,
                                                max_new_tokens=24, eval_limit=0, save_every=0, model=tiny_model)
    run = wm.trainer(cfg, run=tmp_path / "run", progress=False).train()
    assert run.metrics()["steps"] == 2 and len(run.step_metrics()) == 2
'''


def check_name(name: str) -> str | None:
    """Why ``name`` cannot be a method's name, or None."""
    if not NAME.fullmatch(name) or keyword.iskeyword(name):
        return (f"{name!r} is not a method name: give 2-40 lowercase letters, digits and underscores, starting with a "
                "letter (it becomes a Python package, e.g. my_searcher)")
    if name == "new":
        return "'new' is the command's own word (`workbench methods new NAME`); pick another name"
    from workbench.methods import METHODS, PRESETS, PROTOCOLS

    if name in METHODS or name in PRESETS or name in PROTOCOLS:
        return f"{name!r} is taken (a method, reward preset or protocol of that name exists); pick another name"
    return None


def new_method(name: str, root: str | Path, title: str = "", citation: str = "", arxiv: str = "",
               summary: str = "") -> list[Path]:
    """Write the package and its test under the checkout ``root``; returns the files written. Refuses (ValueError,
    one line) a bad or taken name, an arXiv id that is not one, and any file that already exists."""
    why = check_name(name)
    if why:
        raise ValueError(why)
    if arxiv and not re.fullmatch(r"\d{4}\.\d{4,5}", arxiv):
        raise ValueError(f"--arxiv {arxiv!r} is not an arXiv id: give its number, e.g. 2503.05592")
    for flag, v in (("--title", title), ("--citation", citation), ("--summary", summary)):
        if '"' in v or "\\" in v or "\n" in v:
            raise ValueError(f"{flag} {v!r}: leave out double quotes, backslashes and line breaks")
    root = Path(root)
    pkg = root / "workbench" / "methods" / name
    test = root / "tests" / f"test_{name}.py"
    for p in (pkg, test):
        if p.exists():
            raise ValueError(f"{p} exists already; remove it or pick another name")
    fields = {"name": name, "title": title or f"{name} (a new method)", "citation": citation or "-",
              "source": f"arXiv:{arxiv}" if arxiv else "no arXiv id yet: give the paper's",
              "summary": summary or "what the method changes, in one paragraph."}
    pkg.mkdir(parents=True)
    files = {pkg / "__init__.py": INIT, pkg / "reward.py": REWARD, test: TEST}
    for path, text in files.items():
        path.write_text(text.format(**fields), encoding="utf-8")
    return list(files)
