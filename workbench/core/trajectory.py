"""``Trajectory``: one multi-turn rollout, token by token, with its Parquet round trip.

A trajectory is a prompt followed by turns. A *policy* turn holds exactly the token ids the
model sampled (and their logprobs); an *observation* turn holds the ids of the tool output
the environment appended (encoded once). ``token_ids`` is their concatenation, and
``loss_mask`` is 1 exactly on policy tokens: that is what the trainer consumes, with no
decode/re-encode between rollout and loss (token-in, token-out).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workbench.core.types import ToolCall
from workbench.util.textsafe import clean_text

POLICY = "policy"
OBSERVATION = "observation"


@dataclass
class Turn:
    """One segment of a trajectory: sampled by the policy, or appended by the environment."""

    kind: str  # POLICY | OBSERVATION
    text: str
    token_ids: list[int]
    logprobs: list[float] | None = None
    """Per-token logprob of each sampled id under the sampling policy (policy turns only)."""
    finish_reason: str | None = None
    """Policy turns: ``stop`` (a stop string), ``eos``, ``length`` (max new tokens) or ``budget``."""
    action: dict[str, Any] | None = None
    """Parsed action of a policy turn: ``{"kind": search|answer|invalid|none, "payload", "reason"}``."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in (POLICY, OBSERVATION):
            raise ValueError(f"Turn.kind must be {POLICY!r} or {OBSERVATION!r}, got {self.kind!r}")
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(f"Turn: {len(self.logprobs)} logprobs for {len(self.token_ids)} tokens")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Turn:
        d = dict(d)
        d["tool_calls"] = [ToolCall.from_dict(c) for c in d.get("tool_calls") or []]
        return cls(**d)


@dataclass
class Trajectory:
    """A whole rollout for one question (one member of a group)."""

    id: str
    example_id: str
    question: str
    protocol: str
    prompt_ids: list[int]
    prompt_text: str = ""
    turns: list[Turn] = field(default_factory=list)
    answer: str | None = None
    """Final answer extracted by the protocol (``None`` if the agent never answered)."""
    finish_reason: str = ""
    """Why the rollout ended: ``answer``, ``no_action``, ``eos``, ``max_turns``, ``length``, ``budget``."""
    group_id: str = ""
    sample_idx: int = 0
    flags: dict[str, Any] = field(default_factory=dict)
    """Format flags from the protocol's checker (``format_ok``, ``answer_boxes``, ``dag_valid``...)."""
    meta: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ token views
    @property
    def response_ids(self) -> list[int]:
        return [t for turn in self.turns for t in turn.token_ids]

    @property
    def token_ids(self) -> list[int]:
        """Prompt ids followed by every turn's ids: the exact sequence the trainer sees."""
        return list(self.prompt_ids) + self.response_ids

    @property
    def response_loss_mask(self) -> list[int]:
        return [1 if turn.kind == POLICY else 0 for turn in self.turns for _ in turn.token_ids]

    @property
    def loss_mask(self) -> list[int]:
        """1 on policy tokens, 0 on prompt and observation tokens (aligned with ``token_ids``)."""
        return [0] * len(self.prompt_ids) + self.response_loss_mask

    @property
    def response_logprobs(self) -> list[float]:
        """Sampling logprobs aligned with ``response_ids`` (0.0 on observation tokens)."""
        out: list[float] = []
        for turn in self.turns:
            out.extend(turn.logprobs if turn.logprobs is not None else [0.0] * len(turn.token_ids))
        return out

    # ------------------------------------------------------------------ summaries
    @property
    def policy_turns(self) -> list[Turn]:
        return [t for t in self.turns if t.kind == POLICY]

    @property
    def actions(self) -> list[dict[str, Any]]:
        return [t.action for t in self.turns if t.action is not None]

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [c for t in self.turns for c in t.tool_calls]

    @property
    def searches(self) -> list[dict[str, Any]]:
        """The search actions that were executed: a tool call is recorded for each, on its own turn or on the
        observation that follows it. A search cut off by the turn or token limit ran no tool and is not here."""
        out = []
        for i, turn in enumerate(self.turns):
            if turn.action is None or turn.action.get("kind") != "search":
                continue
            nxt = self.turns[i + 1] if turn.kind == POLICY and i + 1 < len(self.turns) else None
            if turn.tool_calls or (nxt is not None and nxt.kind == OBSERVATION and nxt.tool_calls):
                out.append(turn.action)
        return out

    @property
    def n_searches(self) -> int:
        """Search actions executed (the retrieval count RC / DynaSearcher's t; see ``searches``)."""
        return len(self.searches)

    @property
    def n_invalid(self) -> int:
        return sum(1 for a in self.actions if a.get("kind") == "invalid")

    @property
    def n_policy_tokens(self) -> int:
        return sum(len(t.token_ids) for t in self.policy_turns)

    @property
    def response_text(self) -> str:
        return "".join(t.text for t in self.turns)

    @property
    def latency_s(self) -> float:
        return sum(t.latency_s for t in self.turns)

    @property
    def tool_latency_s(self) -> float:
        return sum(c.latency_s for c in self.tool_calls)

    @property
    def queries(self) -> list[str]:
        """The queries of the executed searches (``searches``), as text (JSON payloads contribute their ``query`` field)."""
        out = []
        for a in self.searches:
            p = a.get("payload")
            if isinstance(p, dict):
                p = p.get("query", "")
            out.append(str(p or ""))
        return out

    # ------------------------------------------------------------------ serialization
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["turns"] = [t.to_dict() for t in self.turns]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        d = dict(d)
        d["turns"] = [Turn.from_dict(t) for t in d.get("turns") or []]
        return cls(**d)

    def to_row(self) -> dict[str, Any]:
        """A flat Parquet row: scalar columns for querying, token lists, and the turns as JSON."""
        return {
            "id": self.id,
            "example_id": self.example_id,
            "group_id": self.group_id,
            "sample_idx": self.sample_idx,
            "protocol": self.protocol,
            "question": self.question,
            "answer": self.answer,
            "finish_reason": self.finish_reason,
            "n_turns": len(self.turns),
            "n_searches": self.n_searches,
            "n_invalid": self.n_invalid,
            "n_policy_tokens": self.n_policy_tokens,
            "n_tokens": len(self.prompt_ids) + len(self.response_ids),
            "latency_s": self.latency_s,
            "tool_latency_s": self.tool_latency_s,
            "prompt_text": self.prompt_text,
            "response_text": self.response_text,
            "prompt_ids": list(self.prompt_ids),
            "response_ids": self.response_ids,
            "response_loss_mask": self.response_loss_mask,
            "response_logprobs": self.response_logprobs,
            "turns_json": json.dumps([t.to_dict() for t in self.turns], ensure_ascii=False),
            "flags_json": json.dumps(self.flags, ensure_ascii=False, default=str),
            **{name: _typed(self.meta.get(name), kind) for name, kind in META_COLUMNS.items()},
            "meta_json": json.dumps(self.meta, ensure_ascii=False, default=str),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Trajectory:
        return cls(
            id=row["id"],
            example_id=row["example_id"],
            question=row["question"],
            protocol=row["protocol"],
            prompt_ids=[int(x) for x in row["prompt_ids"]],
            prompt_text=row.get("prompt_text") or "",
            turns=[Turn.from_dict(t) for t in json.loads(row["turns_json"])],
            answer=row.get("answer"),
            finish_reason=row.get("finish_reason") or "",
            group_id=row.get("group_id") or "",
            sample_idx=int(row.get("sample_idx") or 0),
            flags=json.loads(row.get("flags_json") or "{}"),
            meta=_meta_from_row(row),
        )


#: ``meta`` keys that are also first-class typed columns of ``trajectories.parquet`` (so pandas, DuckDB or
#: Polars can filter on them without parsing ``meta_json``, which still holds the whole ``meta``).
META_COLUMNS: dict[str, str] = {"dataset": "string", "method": "string", "qtype": "string", "hops": "int"}


def _typed(v: Any, kind: str) -> Any:
    if v is None or v == "":
        return None
    if kind == "int":
        try:
            return int(v)
        except (TypeError, ValueError):
            return None
    return str(v)


def _meta_from_row(row: dict[str, Any]) -> dict[str, Any]:
    """``meta`` from ``meta_json``, with the typed columns filled in where the JSON lacks them (files from
    before the columns existed have only the JSON; an extra ``method`` column a writer passed wins)."""
    meta = json.loads(row.get("meta_json") or "{}")
    for name in META_COLUMNS:
        if row.get(name) is not None and meta.get(name) is None:
            meta[name] = row[name]
    return meta


def save_trajectories(trajs: list[Trajectory], path: str | Path, extra_columns: dict[str, list[Any]] | None = None) -> Path:
    """Write trajectories to Parquet atomically (one row each, see ``Trajectory.to_row``); every
    text column is made valid UTF-8 (``workbench.util.textsafe.clean_text``). ``extra_columns`` are
    appended; one named like a built-in column (e.g. ``method``) replaces it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from workbench.util.io import atomic_path

    # text from models and tools may hold lone surrogates or NULs: made valid UTF-8 here, once
    rows = [{k: clean_text(v) if isinstance(v, str) else v for k, v in t.to_row().items()} for t in trajs]
    table = pa.Table.from_pylist(rows, schema=arrow_schema()) if rows else arrow_schema().empty_table()
    for name, values in (extra_columns or {}).items():
        if name in table.column_names:
            i = table.column_names.index(name)
            table = table.set_column(i, table.schema.field(i), pa.array(values, type=table.schema.field(i).type))
        else:
            table = table.append_column(name, pa.array(values))
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=ROW_GROUP_ROWS)
    return Path(path)


#: Rows per Parquet row group of ``trajectories.parquet``: a reader of one trajectory (the inspector, the
#: dashboard's drill-down) decodes only its row group, not the whole file (bench/bench_scale.py).
ROW_GROUP_ROWS = 2000


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Read trajectories written by :func:`save_trajectories`."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no trajectories file at {path}")
    return [Trajectory.from_row(r) for r in pq.read_table(path).to_pylist()]


def arrow_schema():
    """The Arrow schema of ``trajectories.parquet`` (one row per trajectory)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.string()),
            ("example_id", pa.string()),
            ("group_id", pa.string()),
            ("sample_idx", pa.int32()),
            ("protocol", pa.string()),
            ("question", pa.string()),
            ("answer", pa.string()),
            ("finish_reason", pa.string()),
            ("n_turns", pa.int32()),
            ("n_searches", pa.int32()),
            ("n_invalid", pa.int32()),
            ("n_policy_tokens", pa.int32()),
            ("n_tokens", pa.int32()),
            ("latency_s", pa.float64()),
            ("tool_latency_s", pa.float64()),
            ("prompt_text", pa.string()),
            ("response_text", pa.string()),
            ("prompt_ids", pa.list_(pa.int32())),
            ("response_ids", pa.list_(pa.int32())),
            ("response_loss_mask", pa.list_(pa.int8())),
            ("response_logprobs", pa.list_(pa.float32())),
            ("turns_json", pa.string()),
            ("flags_json", pa.string()),
            *((name, pa.int32() if kind == "int" else pa.string()) for name, kind in META_COLUMNS.items()),
            ("meta_json", pa.string()),
        ]
    )


def token_pieces(traj: Trajectory, tokenizer: Any, include_prompt: bool = False) -> list[dict[str, Any]]:
    """Per-token records for the token view: text, loss mask, logprob, turn index and kind.

    Token texts come from ``convert_ids_to_tokens`` made readable (byte-level markers turned
    back into spaces/newlines); ids are never re-encoded.
    """
    rows: list[dict[str, Any]] = []
    if include_prompt:
        for tid in traj.prompt_ids:
            rows.append({"id": tid, "text": _piece(tokenizer, tid), "mask": 0, "logprob": None, "turn": -1, "kind": "prompt"})
    for ti, turn in enumerate(traj.turns):
        lps = turn.logprobs or [None] * len(turn.token_ids)
        mask = 1 if turn.kind == POLICY else 0
        for tid, lp in zip(turn.token_ids, lps):
            rows.append({"id": tid, "text": _piece(tokenizer, tid), "mask": mask, "logprob": lp, "turn": ti, "kind": turn.kind})
    return rows


def _piece(tokenizer: Any, tid: int) -> str:
    return tokenizer.decode([tid], skip_special_tokens=False, clean_up_tokenization_spaces=False)
