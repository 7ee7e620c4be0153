"""Health signals of a training run and the alarms that watch them, every step.

A policy can collapse while its training reward looks healthy (it stops searching, stops answering, loops to the
turn limit, or the rollout engine keeps sampling a stale adapter). Each step, :func:`step_signals` reads what the step
already has (its metrics row, its trajectories and their features) into a few numbers, and :class:`HealthMonitor`
compares each with its **reference** (its mean over the run's first ``reference_steps`` steps: the starting policy)
through the rules of :data:`RULES`. A rule that starts to hold is an **alarm**: one line on the console as it
happens, a row in ``health.jsonl`` in the run, a strip in notebook 04 and the dashboard's training view, and
``--stop-on-alarm NAME[,NAME]`` (or ``all``) ends the run at that step.

The rules are one small table (:data:`RULES`); a run adds or replaces rules by name with ``TrainConfig.health_rules``
(a list of :class:`Rule` fields as dicts), e.g. ``[{"name": "search_drop", "signal": "searches", "when": "drop",
"amount": 0.25}]``. :func:`replay` runs the rules over a stored run (its ``metrics.jsonl`` and, where kept, its
step tables), which is how ``bench/health_replay.py`` checks them against every stored run.

The rule kinds: ``drop`` (the value fell below ``reference × (1 − amount)``, and by at least ``margin``),
``rise`` (above ``reference × amount``, and by at least ``margin``), ``above`` / ``below`` (an absolute bound:
``amount``). ``steps``: how many steps in a row the condition must hold before the alarm fires.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from workbench.core.trajectory import Trajectory

HEALTH_FILE = "health.jsonl"

#: Every signal a step can have and what it is (``searches_h<k>``: one per hop count the step's questions have).
SIGNALS: dict[str, str] = {
    "searches": "searches per trajectory",
    "searches_multi": "searches per trajectory on questions of two or more hops",
    "searches_h<k>": "searches per trajectory on questions of k hops",
    "short_answers": "share of multi-hop trajectories answered with fewer searches than the question has hops",
    "answered": "share of trajectories that gave an answer",
    "format_ok": "share of trajectories whose every turn is well-formed",
    "out_of_turns": "share of trajectories that ran out of turns or tokens without answering",
    "response_len": "policy tokens per trajectory",
    "neg_logprob": "mean negative logprob of the sampled tokens (the sampler's own; near 0 = deterministic)",
    "entropy": "mean token entropy of the policy on the batch (the update's)",
    "uniform_groups": "share of groups whose rewards are all equal (no learning signal from them)",
    "logprob_gap": "mean |rollout logprob - trainer logprob| of the sampled tokens (the LoRA reached the engine)",
    "kl": "KL to the starting policy (only where the loss computes it: kl_coef > 0)",
    "reward": "mean reward",
    "reward_<component>": "mean of one reward component",
}


@dataclass(frozen=True)
class Rule:
    """One alarm: ``signal`` checked against its reference each step (see the module docstring for ``when``)."""

    name: str
    signal: str
    when: str
    amount: float
    margin: float = 0.0
    steps: int = 1
    says: str = ""

    def __post_init__(self) -> None:
        if self.when not in ("drop", "rise", "above", "below"):
            raise ValueError(f"health rule {self.name!r}: when={self.when!r} is not one of drop, rise, above, below")
        if not isinstance(self.amount, (int, float)) or not math.isfinite(self.amount):
            raise ValueError(f"health rule {self.name!r}: amount must be a finite number, got {self.amount!r}")
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"health rule {self.name!r}: steps must be a whole number >= 1, got {self.steps!r}")

    def holds(self, value: float | None, reference: float | None) -> bool:
        if value is None or not math.isfinite(value):
            return False
        if self.when == "above":
            return value > self.amount
        if self.when == "below":
            return value < self.amount
        if reference is None or not math.isfinite(reference):
            return False
        if self.when == "drop":
            return value < reference * (1 - self.amount) and reference - value >= self.margin
        return value > reference * self.amount and value - reference >= self.margin

    def describe(self, value: float, reference: float | None) -> str:
        """What happened, in numbers: ``searches 1.04, down 36% from 1.62 at the start``."""
        if self.when in ("above", "below"):
            return f"{self.signal} {value:.3g}, {self.when} {self.amount:g}"
        assert reference is not None
        way = "down" if self.when == "drop" else "up"
        if not reference:  # a rise from nothing: no percentage to give
            return f"{self.signal} {value:.3g}, {way} from 0 at the start"
        return f"{self.signal} {value:.3g}, {way} {abs((value - reference) / reference):.0%} from {reference:.3g} at the start"


#: The rules every run watches (extend or replace by name with ``TrainConfig.health_rules``).
RULES: tuple[Rule, ...] = (
    Rule("search_drop", "searches", "drop", 1 / 3, margin=0.3,
         says="searches fell by more than a third: the policy may be collapsing into searching less than the "
              "questions need"),
    Rule("deep_search_drop", "searches_multi", "drop", 1 / 3, margin=0.3,
         says="searches on multi-hop questions fell by more than a third"),
    Rule("short_answers", "short_answers", "rise", 2.0, margin=0.2,
         says="multi-hop questions answered before their hops were searched doubled"),
    Rule("answer_drop", "answered", "drop", 1 / 3, margin=0.1, says="the share that answers fell by more than a third"),
    Rule("format_drop", "format_ok", "drop", 0.5, margin=0.1, says="the format-valid share halved"),
    Rule("out_of_turns", "out_of_turns", "rise", 3.0, margin=0.1,
         says="trajectories out of turns tripled: the policy may be looping to the turn limit"),
    Rule("stale_adapter", "logprob_gap", "above", 0.05,
         says="the rollout engine's logprobs differ from the trainer's by more than 0.05 nats a token: it may be "
              "sampling another adapter than the one being trained"),
    Rule("entropy_collapse", "entropy", "drop", 0.9, margin=0.05,
         says="the policy's entropy fell by 90%: it is turning deterministic, and groups stop differing"),
    Rule("no_signal", "uniform_groups", "above", 0.9, steps=2,
         says="more than 90% of groups had equal rewards two steps running: almost nothing to learn from"),
    # a rise from the start's KL, not a level: the reference is the base model (the adapter disabled), so a run that
    # continues an SFT adapter starts 0.3-0.6 nats a token away from it without having drifted at all
    Rule("kl_drift", "kl", "rise", 1.0, margin=0.2,
         says="the KL to the reference policy grew by more than 0.2 nats a token from the start's"),
)


def rules_for(extra: Sequence[Mapping[str, Any]] | None = None) -> tuple[Rule, ...]:
    """:data:`RULES` with ``extra`` (dicts of :class:`Rule` fields) added, or replacing the rule of the same name.
    Raises ``ValueError`` naming a bad rule and the fields a rule has."""
    rules = {r.name: r for r in RULES}
    names = [f.name for f in dataclasses.fields(Rule)]
    for i, d in enumerate(extra or ()):
        if not isinstance(d, Mapping) or not isinstance(d.get("name"), str):
            raise ValueError(f"TrainConfig.health_rules[{i}]: give a dict with a name, e.g. "
                             '{"name": "search_drop", "signal": "searches", "when": "drop", "amount": 0.25}')
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ValueError(f"TrainConfig.health_rules[{i}] ({d['name']}): unknown field(s) {unknown}; a rule has "
                             f"{', '.join(names)}")
        base = rules.get(d["name"])
        fields = {**dataclasses.asdict(base), **d} if base is not None else dict(d)
        missing = [n for n in ("signal", "when", "amount") if n not in fields]
        if missing:
            raise ValueError(f"TrainConfig.health_rules[{i}] ({d['name']}): a new rule needs {', '.join(missing)}")
        try:
            rules[d["name"]] = Rule(**fields)
        except TypeError as e:
            raise ValueError(f"TrainConfig.health_rules[{i}] ({d['name']}): {e}") from None
    return tuple(rules.values())


def parse_stop_on(text: str | None, rules: Sequence[Rule]) -> frozenset[str]:
    """The alarms ``--stop-on-alarm`` names (``all`` = every rule); an unknown name is an error naming the rules."""
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    known = [r.name for r in rules]
    if "all" in names:
        return frozenset(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"TrainConfig.stop_on_alarm: unknown alarm(s) {unknown}; the rules are {', '.join(known)} "
                         "(or all)")
    return frozenset(names)


# ------------------------------------------------------------------------------------------- signals


OUT_OF_TURNS = ("max_turns", "budget")
"""Finish reasons of a trajectory that ran out of room (turns, tokens) without answering."""


def _mean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else None


def _finite(v: Any) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def row_signals(row: Mapping[str, Any]) -> dict[str, float]:
    """The signals a step's ``metrics.jsonl`` row carries (all a stored run without step tables has)."""
    out: dict[str, float | None] = {
        "searches": _finite(row.get("searches_mean")), "answered": _finite(row.get("answered")),
        "format_ok": _finite(row.get("format_ok")), "response_len": _finite(row.get("response_len")),
        "entropy": _finite(row.get("entropy")), "logprob_gap": _finite(row.get("rollout_logprob_diff")),
        "reward": _finite(row.get("reward_mean")),
    }
    mixed = _finite(row.get("mixed_group_share"))
    out["uniform_groups"] = None if mixed is None else 1.0 - mixed
    if _finite(row.get("kl_coef")) and _finite(row.get("kl")) is not None:  # a KL the loss computed (kl_coef > 0)
        out["kl"] = _finite(row.get("kl"))
    for key, value in row.items():
        if key.startswith("reward_") and key.endswith("_mean") and key != "reward_mean":
            out[key[: -len("_mean")]] = _finite(value)
    return {k: v for k, v in out.items() if v is not None}


def trajectory_signals(records: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The signals only the step's trajectories have, from records of ``hops`` (None where the question has no
    count), ``searches``, ``answered``, ``finish_reason`` and ``logprobs`` (the sampled tokens' logprobs)."""
    recs = list(records)
    if not recs:
        return {}
    out: dict[str, float | None] = {}
    out["out_of_turns"] = sum(r["finish_reason"] in OUT_OF_TURNS and not r["answered"] for r in recs) / len(recs)
    lps = [lp for r in recs for lp in (r.get("logprobs") or ()) if lp is not None and math.isfinite(lp)]
    out["neg_logprob"] = -sum(lps) / len(lps) if lps else None
    by_hops: dict[int, list[float]] = {}
    for r in recs:
        h = r.get("hops")
        if h is not None and math.isfinite(float(h)):
            by_hops.setdefault(int(h), []).append(float(r["searches"]))
    for h, xs in sorted(by_hops.items()):
        out[f"searches_h{h}"] = sum(xs) / len(xs)
    multi = [r for r in recs if r.get("hops") is not None and math.isfinite(float(r["hops"])) and r["hops"] >= 2]
    if multi:
        out["searches_multi"] = sum(float(r["searches"]) for r in multi) / len(multi)
        out["short_answers"] = sum(bool(r["answered"]) and r["searches"] < r["hops"] for r in multi) / len(multi)
    return {k: v for k, v in out.items() if v is not None}


def records_of(trajectories: Sequence[Trajectory], features: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """:func:`trajectory_signals`' records of ``Trajectory`` objects (hops from the features' ``hops`` column where
    given, else the trajectory's meta)."""
    hops = None
    if features is not None and "hops" in getattr(features, "columns", ()):
        hops = [None if h != h else h for h in features["hops"].tolist()]
    out = []
    for i, t in enumerate(trajectories):
        h = hops[i] if hops is not None and i < len(hops) else (t.meta or {}).get("hops")
        lps = [lp for turn in t.turns if turn.kind == "policy" for lp in (turn.logprobs or ())]
        out.append({"hops": h, "searches": t.n_searches, "answered": t.answer is not None,
                    "finish_reason": t.finish_reason, "logprobs": lps})
    return out


def step_signals(row: Mapping[str, Any], trajectories: Sequence[Trajectory] | None = None,
                 features: pd.DataFrame | None = None) -> dict[str, float]:
    """Every signal of one training step: its metrics row's and, given them, its trajectories'."""
    out = row_signals(row)
    if trajectories:
        out.update(trajectory_signals(records_of(trajectories, features)))
    return out


# ------------------------------------------------------------------------------------------- the monitor


@dataclass
class Alarm:
    """A rule that started to hold at ``step``."""

    name: str
    step: int
    signal: str
    value: float
    reference: float | None
    says: str
    text: str

    def line(self) -> str:
        """The console line: ``alarm search_drop at step 5: searches 1.04, down 36% from 1.62 at the start; ...``."""
        return f"alarm {self.name} at step {self.step}: {self.text}; {self.says}"


class HealthMonitor:
    """Reference values and alarm state over a run's steps (:meth:`observe` once per step, in order)."""

    def __init__(self, rules: Sequence[Rule] = RULES, reference_steps: int = 1):
        self.rules = tuple(rules)
        self.reference_steps = max(1, int(reference_steps))
        self._seen: dict[str, list[float]] = {}
        self._streak: dict[str, int] = {}
        self._active: set[str] = set()
        self.alarms: list[Alarm] = []

    def reference(self, signal: str) -> float | None:
        """The mean of ``signal`` over the first ``reference_steps`` steps that had it."""
        xs = self._seen.get(signal, [])[: self.reference_steps]
        return sum(xs) / len(xs) if xs else None

    def observe(self, step: int, signals: Mapping[str, float]) -> tuple[dict[str, Any], list[Alarm]]:
        """Take step ``step``'s signals; returns its ``health.jsonl`` row and the alarms that fired at it."""
        warming: set[str] = set()
        for name, value in signals.items():
            seen = self._seen.setdefault(name, [])
            if len(seen) < self.reference_steps:
                warming.add(name)  # a reference step is not judged against itself
                seen.append(value)
        fired: list[Alarm] = []
        active = []
        for rule in self.rules:
            value = signals.get(rule.signal)
            ref = self.reference(rule.signal)
            relative = rule.when in ("drop", "rise")
            holds = rule.holds(value, ref) and not (relative and rule.signal in warming)
            self._streak[rule.name] = self._streak.get(rule.name, 0) + 1 if holds else 0
            if self._streak[rule.name] >= rule.steps:
                active.append(rule.name)
                if rule.name not in self._active:
                    assert value is not None
                    alarm = Alarm(rule.name, step, rule.signal, float(value), ref, rule.says, rule.describe(value, ref))
                    fired.append(alarm)
                    self.alarms.append(alarm)
        self._active = set(active)
        row = {"step": step, "signals": {k: round(v, 6) for k, v in sorted(signals.items())},
               "reference": {r.signal: round(ref, 6) for r in self.rules
                             if (ref := self.reference(r.signal)) is not None},
               "active": active, "fired": [dataclasses.asdict(a) for a in fired]}
        return row, fired


# ------------------------------------------------------------------------------------------- stored runs


def read_health(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run's ``health.jsonl`` rows (empty where it has none; a line that does not read is skipped)."""
    from workbench.util.io import read_jsonl

    path = Path(run_dir) / HEALTH_FILE
    if not path.exists():
        return []
    return read_jsonl(path, keep=lambda row: isinstance(row, dict) and isinstance(row.get("step"), int))[0]


def replay(rows: Sequence[Mapping[str, Any]], step_records: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
           rules: Sequence[Rule] = RULES, reference_steps: int = 1) -> tuple[list[dict[str, Any]], list[Alarm]]:
    """The rules over a stored run: its training rows (``metrics.jsonl`` rows with ``reward_mean``) and, where kept,
    each step's trajectory records (:func:`trajectory_signals`). Returns the health rows and every alarm."""
    monitor = HealthMonitor(rules, reference_steps)
    out = []
    for row in rows:
        if "reward_mean" not in row:
            continue  # an evaluation row
        step = int(row["step"])
        signals = row_signals(row)
        if step_records and step in step_records:
            signals.update(trajectory_signals(step_records[step]))
        health, _ = monitor.observe(step, signals)
        out.append(health)
    return out, monitor.alarms


def run_step_records(run_dir: str | Path) -> dict[int, list[dict[str, Any]]]:
    """Each step's trajectory records of a stored training run, from ``steps/<n>.trajectories.parquet`` (and the
    step's features for the hop counts); empty where the run kept no step tables."""
    import pyarrow.parquet as pq

    out: dict[int, list[dict[str, Any]]] = {}
    steps = Path(run_dir) / "steps"
    for path in sorted(steps.glob("*.trajectories.parquet")) if steps.is_dir() else []:
        step = int(path.name.split(".")[0])
        table = pq.read_table(path).to_pydict()
        feats = path.with_name(path.name.replace(".trajectories.", ".features."))
        hops = pq.read_table(feats, columns=["hops"]).column("hops").to_pylist() if feats.is_file() else None
        n = len(table.get("finish_reason", []))
        masks, logprobs = table.get("response_loss_mask", [None] * n), table.get("response_logprobs", [None] * n)
        formats = table.get("format_ok", [None] * n)
        for i in range(n):
            lps, mask = logprobs[i] or [], masks[i]
            sampled = [lp for lp, m in zip(lps, mask) if m] if mask is not None else lps  # the policy's tokens only
            h = hops[i] if hops is not None else None
            out.setdefault(step, []).append({
                "hops": None if h is None or h != h else h, "searches": int(table["n_searches"][i]),
                "answered": table["answer"][i] is not None, "finish_reason": table["finish_reason"][i] or "",
                "logprobs": sampled, "format_ok": formats[i]})
    return out
