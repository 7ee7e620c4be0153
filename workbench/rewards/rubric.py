"""``Rubric``: named reward components over a features table, combined with weights.

A component is a plain function of the feature columns (numpy arrays, one value per
trajectory) and keyword-only parameters; its ``__name__`` is its name in the breakdown::

    def r_penalty(c, *, beta=-0.2, gamma=0.9):
        return np.maximum(beta, 1.0 - gamma ** (c["n_searches"] - c["hops"]))

``Rubric(components=[...], weights=[...], params={...})(features)`` returns a
:class:`RewardTable`: ``total = Σ weight·component`` plus one column per component. A
component with weight 0 is computed and reported ("log it, don't reward it") and never
enters the total.

Missing data is never a silent 0: a feature column that is absent reads as all-NaN, a
component propagates NaN from every input its formula uses, a NaN in a weighted component
makes the total NaN, and the breakdown counts them (``missing``). A component that raises
makes the rubric raise.

Parameters are shared by name across the components of one rubric (β of the DynaSearcher
penalty is the same β inside its gain). Their defaults come from the function signatures;
:func:`params` attaches allowed ranges / choices, checked on construction and in
:meth:`Rubric.with_params` (unknown names and out-of-range values raise ``ValueError``
with the valid names / the allowed range).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import numpy.typing as npt

#: Columns copied from the features table into a RewardTable (when present), to key rows.
KEY_COLUMNS = ("id", "group_id", "sample_idx")


# ----------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class Spec:
    """What values a parameter accepts: a numeric range or a set of choices (or a custom check).

    ``check(value)`` returns ``None`` when the value is valid, else a message naming the allowed values.
    """

    description: str = ""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] | None = None
    validator: Callable[[Any], str | None] | None = None

    def allowed(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.low is None and self.high is None:
            return "any number"
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
        return f"{'(' if self.low_open or self.low is None else '['}{lo}, {hi}{')' if self.high_open or self.high is None else ']'}"

    def check(self, value: object) -> str | None:
        if self.validator is not None:
            return self.validator(value)
        if self.choices is not None:
            return None if value in self.choices else f"allowed: {self.allowed()}"
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            return f"expected a number in {self.allowed()}, got {type(value).__name__}"
        v = float(value)
        if math.isnan(v):
            return f"NaN is not allowed; allowed range {self.allowed()}"
        if self.low is not None and (v < self.low or (self.low_open and v == self.low)):
            return f"allowed range {self.allowed()}"
        if self.high is not None and (v > self.high or (self.high_open and v == self.high)):
            return f"allowed range {self.allowed()}"
        return None


def in_range(low: float | None = None, high: float | None = None, *, low_open: bool = False, high_open: bool = False,
             description: str = "") -> Spec:
    """A numeric parameter in ``[low, high]`` (``low_open`` / ``high_open`` exclude the ends)."""
    return Spec(description, low, high, low_open, high_open)


def one_of(*choices: Any, description: str = "") -> Spec:
    return Spec(description, choices=tuple(choices))


def params(**specs: Spec) -> Callable[[Callable], Callable]:
    """Decorator for a component function: attaches parameter specs (``fn.__reward_params__``)
    and memoizes its value per :class:`Columns` and keyword arguments, so a component that
    other components reuse (r_ans inside r_acc) is computed once per scoring call."""

    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def component(c: Any, **kw: Any) -> Any:
            memo = getattr(c, "memo", None)
            if memo is None:
                return fn(c, **kw)
            key = (fn, tuple(sorted(kw.items())))
            if key not in memo:
                memo[key] = fn(c, **kw)
            return memo[key]

        component.__reward_params__ = {**getattr(fn, "__reward_params__", {}), **specs}  # type: ignore[attr-defined]
        return component

    return deco


def _signature_params(fn: Callable) -> dict[str, Any]:
    """Keyword parameters with defaults (everything after the features argument)."""
    out = {}
    for i, p in enumerate(inspect.signature(fn).parameters.values()):
        if i == 0 and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            continue  # the features argument
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if p.default is p.empty:
            raise TypeError(f"reward component {fn.__name__!r}: parameter {p.name!r} needs a default value")
        out[p.name] = p.default
    return out


# ----------------------------------------------------------------------------- columns


class Columns:
    """Read-only view of feature columns as float64 numpy arrays.

    ``c["f1"]`` converts once (bool → 0/1, None → NaN); a column the table does not have
    reads as all-NaN (recorded in ``absent``). ``c.has(name)`` tells whether it exists;
    ``c.raw(name)`` gives the column as stored (e.g. strings).
    """

    def __init__(self, data: pd.DataFrame | Mapping[str, npt.ArrayLike]):
        if isinstance(data, pd.DataFrame):
            self._df: pd.DataFrame | None = data
            self._map: Mapping[str, npt.ArrayLike] = {}
            self.n = len(data)
        else:
            self._df = None
            self._map = data
            lens = {len(np.atleast_1d(v)) for v in data.values()}
            if len(lens) > 1:
                raise ValueError(f"feature columns have different lengths: {sorted(lens)}")
            self.n = lens.pop() if lens else 0
        self._cache: dict[str, np.ndarray] = {}
        self.absent: set[str] = set()
        self.memo: dict[Any, Any] = {}
        """Component values computed in this scoring call (see :func:`params`)."""

    def __len__(self) -> int:
        return self.n

    def has(self, name: str) -> bool:
        return name in self._df.columns if self._df is not None else name in self._map

    def raw(self, name: str) -> pd.Series | npt.ArrayLike:
        return self._df[name] if self._df is not None else self._map[name]

    def __getitem__(self, name: str) -> np.ndarray:
        got = self._cache.get(name)
        if got is not None:
            return got
        if not self.has(name):
            self.absent.add(name)
            arr = np.full(self.n, np.nan)
        else:
            arr = to_float(self.raw(name))
            if arr.shape != (self.n,):
                raise ValueError(f"feature column {name!r} has shape {arr.shape}, expected ({self.n},)")
        arr.flags.writeable = False
        self._cache[name] = arr
        return arr


def to_float(values: pd.Series | npt.ArrayLike) -> np.ndarray:
    """A float64 array from a column: bools → 0/1, None/NA → NaN."""
    if isinstance(values, pd.Series):
        if values.dtype == np.float64:
            return values.to_numpy(copy=False)
        if values.dtype == object:
            values = pd.to_numeric(values, errors="raise")
        return values.to_numpy(dtype=np.float64, na_value=np.nan)
    arr = np.asarray(values)
    if arr.dtype == object:
        arr = np.array([np.nan if v is None else v for v in arr.ravel()], dtype=np.float64)
    return np.asarray(arr, dtype=np.float64)


# ----------------------------------------------------------------------------- result


class RewardTable:
    """Rewards of one rubric on one features table.

    ``values``: ``total`` and one float64 array per component (computed eagerly).
    ``frame``: the key columns (``id``, ``group_id``, ``sample_idx`` when the features have
    them), ``total`` and one column per component, in the features' row order.
    ``breakdown``: one row per component (and ``total``): weight, mean, std, min, max,
    ``missing`` (NaN count). ``frame`` and ``breakdown`` are built on first access, so
    re-scoring for a training step or a slider costs only the arithmetic.
    """

    def __init__(self, values: Mapping[str, np.ndarray], params: Mapping[str, Any], weights: Mapping[str, float],
                 absent_columns: tuple[str, ...] = (), features: pd.DataFrame | None = None):
        self.values = dict(values)
        self.params = dict(params)
        self.weights = dict(weights)
        self.absent_columns = absent_columns
        self._features = features
        self._frame: pd.DataFrame | None = None
        self._breakdown: pd.DataFrame | None = None

    @property
    def total(self) -> np.ndarray:
        return self.values["total"]

    @property
    def components(self) -> list[str]:
        return list(self.weights)

    @property
    def frame(self) -> pd.DataFrame:
        if self._frame is None:
            f = self._features
            numeric = pd.DataFrame(self.values, index=None if f is None else f.index, copy=False)
            keys = [] if f is None else [k for k in KEY_COLUMNS if k in f.columns]
            # key columns are shared with the features table, not converted (string columns are costly to copy)
            self._frame = pd.concat([f[keys], numeric], axis=1) if keys else numeric
        return self._frame

    @property
    def breakdown(self) -> pd.DataFrame:
        if self._breakdown is None:
            self._breakdown = _breakdown(self.values, {"total": float("nan"), **self.weights})
        return self._breakdown

    @property
    def missing(self) -> dict[str, int]:
        """NaN count per component (and ``total``)."""
        return {k: int(np.isnan(v).sum()) for k, v in self.values.items()}

    def __getitem__(self, key: str) -> pd.Series:
        return self.frame[key]

    def __len__(self) -> int:
        return len(self.total)

    def __repr__(self) -> str:
        return f"RewardTable({len(self)} rows)\n{self.breakdown.to_string()}"


# ----------------------------------------------------------------------------- rubric


Component = Callable[..., Any]


class Rubric:
    """Weighted reward components over feature columns (see the module docstring).

    Args:
        components: functions ``fn(c, **params) -> array``; ``c`` is a :class:`Columns`.
        weights: one per component (default 1.0 each); 0 = reported only.
        params: overrides of the components' parameter defaults.
        specs: extra parameter specs (merged with those attached by :func:`params`).
        name: a label (the preset name for presets).
    """

    def __init__(
        self,
        components: Sequence[Component],
        weights: Sequence[float] | None = None,
        params: Mapping[str, Any] | None = None,
        specs: Mapping[str, Spec] | None = None,
        name: str = "rubric",
        doc: str = "",
    ):
        self.components = list(components)
        if not self.components:
            raise ValueError("Rubric needs at least one component")
        names = [fn.__name__ for fn in self.components]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"Rubric: duplicate component names {dup}")
        self.names = names
        w = [1.0] * len(names) if weights is None else [float(x) for x in weights]
        if len(w) != len(names):
            raise ValueError(f"Rubric: {len(w)} weights for {len(names)} components ({', '.join(names)})")
        if any(not math.isfinite(x) for x in w):
            raise ValueError(f"Rubric: weights must be finite numbers, got {w}")
        self.weights = dict(zip(names, w))
        self.name = name
        self.doc = doc
        defaults: dict[str, Any] = {}
        owners: dict[str, str] = {}
        merged: dict[str, Spec] = {}
        for fn in self.components:
            for k, v in _signature_params(fn).items():
                if k in defaults and defaults[k] != v:
                    raise ValueError(
                        f"Rubric: parameter {k!r} has default {defaults[k]!r} in {owners[k]} but {v!r} in {fn.__name__}; "
                        "components of one rubric share parameters by name"
                    )
                defaults[k], owners[k] = v, fn.__name__
            merged.update(getattr(fn, "__reward_params__", {}))
        merged.update(specs or {})
        self.defaults = defaults
        self.specs = {k: s for k, s in merged.items() if k in defaults}
        self._accepts = {fn.__name__: set(_signature_params(fn)) for fn in self.components}
        self.params = dict(defaults)
        self._set(params or {})

    # ------------------------------------------------------------------ parameters
    @property
    def param_names(self) -> list[str]:
        return sorted(self.defaults)

    def _set(self, kw: Mapping[str, Any]) -> None:
        unknown = sorted(set(kw) - set(self.defaults))
        if unknown:
            valid = ", ".join(self.param_names) or "(none)"
            raise ValueError(f"{self.name}: unknown parameter(s) {', '.join(map(repr, unknown))}; valid names: {valid}")
        for k, v in kw.items():
            spec = self.specs.get(k)
            problem = spec.check(v) if spec is not None else None
            if problem:
                desc = f" ({spec.description})" if spec and spec.description else ""
                raise ValueError(f"{self.name}: parameter {k}={v!r} is out of range{desc}: {problem}")
            self.params[k] = v

    def with_params(self, **kw: Any) -> Rubric:
        """A new rubric with some parameters changed (validated)."""
        return Rubric(self.components, list(self.weights.values()), {**self.params, **kw}, self.specs, self.name, self.doc)

    def with_weights(self, **kw: float) -> Rubric:
        """A new rubric with some component weights changed."""
        unknown = sorted(set(kw) - set(self.weights))
        if unknown:
            raise ValueError(f"{self.name}: unknown component(s) {unknown}; components: {', '.join(self.names)}")
        w = {**self.weights, **{k: float(v) for k, v in kw.items()}}
        return Rubric(self.components, list(w.values()), self.params, self.specs, self.name, self.doc)

    def describe(self) -> str:
        lines = [f"{self.name}: total = " + " + ".join(f"{w:g}·{n}" for n, w in self.weights.items() if w)]
        for k in self.param_names:
            s = self.specs.get(k)
            lines.append(f"  {k} = {self.params[k]!r}" + (f"   allowed {s.allowed()}" if s else "") +
                         (f"   {s.description}" if s and s.description else ""))
        return "\n".join(lines)

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v!r}" for k, v in sorted(self.params.items()))
        return f"Rubric({self.name!r}, components={self.names}, params={{{ps}}})"

    # ------------------------------------------------------------------ scoring
    def component_values(
        self, features: pd.DataFrame | Mapping[str, npt.ArrayLike] | Columns,
    ) -> tuple[dict[str, np.ndarray], Columns]:
        """Each component's values (float64 arrays), without building a table."""
        c = features if isinstance(features, Columns) else Columns(features)
        out: dict[str, np.ndarray] = {}
        for fn in self.components:
            kw = {k: self.params[k] for k in self._accepts[fn.__name__]}
            v = np.asarray(fn(c, **kw), dtype=np.float64)
            if v.ndim == 0:
                v = np.full(len(c), float(v))
            if v.shape != (len(c),):
                raise ValueError(f"{self.name}: component {fn.__name__!r} returned shape {v.shape}, expected ({len(c)},)")
            out[fn.__name__] = v
        return out, c

    def total(self, values: Mapping[str, np.ndarray], n: int) -> np.ndarray:
        total = np.zeros(n)
        for name, w in self.weights.items():
            if w != 0.0:  # weight 0: logged only (and 0·NaN must not poison the total)
                total += values[name] if w == 1.0 else w * values[name]
        return total

    def __call__(self, features: pd.DataFrame | Mapping[str, npt.ArrayLike]) -> RewardTable:
        values, c = self.component_values(features)
        total = self.total(values, len(c))
        return RewardTable({"total": total, **values}, self.params, self.weights, tuple(sorted(c.absent)),
                           features if isinstance(features, pd.DataFrame) else None)


def _breakdown(values: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> pd.DataFrame:
    rows = []
    for name, v in values.items():
        nan = np.isnan(v)
        n_nan = int(nan.sum())
        ok = v[~nan] if n_nan else v
        rows.append({
            "component": name,
            "weight": weights[name],
            "mean": float(ok.mean()) if ok.size else float("nan"),
            "std": float(ok.std()) if ok.size else float("nan"),
            "min": float(ok.min()) if ok.size else float("nan"),
            "max": float(ok.max()) if ok.size else float("nan"),
            "missing": n_nan,
        })
    return pd.DataFrame(rows).set_index("component")


# ----------------------------------------------------------------------------- NaN-aware helpers for components


def nan_where(cond: np.ndarray, a: npt.ArrayLike, b: npt.ArrayLike, *needed: np.ndarray) -> np.ndarray:
    """``np.where(cond, a, b)`` that is NaN where any array in ``needed`` is NaN (the condition's inputs)."""
    out = np.where(cond, a, b).astype(np.float64, copy=False)
    for x in needed:
        np.copyto(out, np.nan, where=np.isnan(x))
    return out


def is_true(x: np.ndarray) -> np.ndarray:
    """0/1 flag as a boolean mask (NaN → False; combine with ``nan_where`` to keep NaN)."""
    return x == 1.0

