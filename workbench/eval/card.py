"""The eval card: what a score was measured with, written beside every eval run (``card.json``) and compared before
two runs' scores are.

A score in this field means little without its settings: the same adapter scores differently with another corpus,
top-k, turn budget, prompt or answer normalisation. The card gathers them from the run's ``config.json`` and the files
it read, with content hashes where a name could hide a change:

- **model** (name, and the sha256 of its weights file) and **adapter** (path and sha256 of its weights);
- **methods**: each one's protocol arguments and the sha256 of the prompt it builds for a fixed question (a template
  or few-shot change shows there);
- **data**: dataset, file and its sha256 (the world: its id), split, question count;
- **retrieval**: corpus (name, setting, passage count, sha256 of a corpus file), retriever, encoder, index or server;
- **scoring**: the metrics and the answer normalisation (SQuAD's); **sampling** and **budgets**;
- **code**: the commit and whether the tree was dirty (shown, never a reason to refuse).

:func:`differences` lists the settings that change a score (:data:`SCORE_KEYS`) where two cards disagree;
``workbench compare`` refuses to put two runs side by side when there are any, unless ``--allow-different`` (then it
warns, naming each). Runs written before cards existed get one built from their ``config.json`` (no hashes, said so).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CARD_FILE = "card.json"
#: The answer normalisation every metric applies (``workbench.rewards.metrics.normalize_answer``).
NORMALISATION = "SQuAD: lower case, punctuation, articles (a, an, the) and extra whitespace removed"
#: Card fields (dotted paths; ``methods.*`` for every method both runs have) that change a score when they differ.
SCORE_KEYS = (
    "model.name", "model.sha256", "adapter.sha256", "data.dataset", "data.sha256", "data.split", "data.n_questions",
    "retrieval.corpus", "retrieval.setting", "retrieval.n_passages", "retrieval.sha256", "retrieval.retriever",
    "retrieval.encoder", "retrieval.index", "retrieval.server", "scoring.normalisation", "sampling.temperature",
    "sampling.top_p", "sampling.group_size", "budgets.max_turns", "budgets.max_new_tokens", "budgets.max_total_tokens",
    "methods.*.protocol", "methods.*.prompt_sha256",
)
_CHUNK = 1 << 20


def file_sha256(path: str | os.PathLike | None) -> str | None:
    """The sha256 of a file's bytes (None for no path or no file), cached by path, size and mtime under the cache root,
    so a 270 MB weights file is read once per change."""
    if path is None:
        return None
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError:
        return None
    if not p.is_file():
        return None
    from workbench.util.io import atomic_write_json, stable_hash
    from workbench.util.paths import cache_dir

    memo = cache_dir() / "sha256" / f"{stable_hash([str(p.resolve()), st.st_size, st.st_mtime_ns])}.json"
    try:
        return str(json.loads(memo.read_text())["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    digest = h.hexdigest()
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(memo, {"path": str(p), "sha256": digest})
    except OSError:  # a read-only cache: the hash is still right, only not kept
        pass
    return digest


def _weights_file(model: str) -> Path | None:
    from workbench.core.models import resolve_model_path

    try:
        d = Path(resolve_model_path(model))
    except (OSError, ValueError):
        return None
    if d.is_file():
        return d
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (d / name).is_file():
            return d / name
    return None


def prompt_sha256(protocol: Any) -> str | None:
    """The sha256 of the chat messages ``protocol`` builds for a fixed question: its system prompt, template and
    few-shot examples in one number."""
    from workbench.data.example import Example

    try:
        messages = protocol.messages(Example("card", "Which question is this?", ["none"]))
    except Exception:  # noqa: BLE001 - a protocol that cannot build a prompt without its data: no prompt hash
        return None
    return hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()


def build_card(config: dict[str, Any], protocols: dict[str, Any] | None = None, commit: dict[str, Any] | None = None,
               hashes: bool = True, n_questions: int | None = None) -> dict[str, Any]:
    """The card of an eval run from its ``config.json`` (``protocols``: label -> protocol object, for the prompt
    hashes; ``hashes``: read the model, adapter, dataset and corpus files; ``n_questions``: how many were asked)."""
    e = config.get("eval", {})
    roll = config.get("rollout", {})
    model = str(config.get("model"))
    weights = _weights_file(model) if hashes else None
    adapter = e.get("adapter")
    adapter_file = None
    if adapter and hashes:
        try:
            from workbench.eval.adapters import resolve_adapter

            adapter_file = resolve_adapter(adapter) / "adapter_model.safetensors"
        except ValueError:
            adapter_file = None
    data_path = config.get("dataset_path")
    corpus = config.get("corpus")
    corpus_file = corpus if isinstance(corpus, str) and config.get("corpus_setting") == "file" else None
    server = config.get("retrieval_server") or {}
    methods = {}
    for label, m in (config.get("methods") or {}).items():
        proto = (protocols or {}).get(label)
        methods[label] = {"protocol": m.get("protocol"), "prompt_sha256": prompt_sha256(proto) if proto else None}
    return {
        "model": {"name": model, "sha256": file_sha256(weights) if hashes else None, "engine": config.get("rollout_engine")},
        "adapter": {"path": adapter, "sha256": file_sha256(adapter_file) if hashes else None},
        "methods": methods,
        "data": {"dataset": config.get("dataset"), "path": data_path,
                 "sha256": (file_sha256(data_path) if hashes else None) or config.get("world"),
                 "split": config.get("split"), "n_questions": n_questions,
                 "limit": e.get("limit")},
        "retrieval": {"corpus": corpus, "setting": config.get("corpus_setting"), "n_passages": config.get("n_passages"),
                      "sha256": file_sha256(corpus_file) if hashes else None, "retriever": config.get("retriever"),
                      "encoder": e.get("encoder"), "index": e.get("index"), "server": server.get("url")},
        "scoring": {"metrics": ["em", "cem", "f1"], "normalisation": NORMALISATION},
        "sampling": {"temperature": roll.get("temperature"), "top_p": roll.get("top_p"),
                     "group_size": roll.get("group_size"), "seed": roll.get("seed")},
        "budgets": {"max_turns": roll.get("max_turns"), "max_new_tokens": roll.get("max_new_tokens"),
                    "max_total_tokens": roll.get("max_total_tokens")},
        "code": commit or {},
        "hashed": bool(hashes),
    }


def read_card(run_dir: str | os.PathLike) -> dict[str, Any]:
    """A run's ``card.json``, or for a run from before cards one built from its ``config.json`` without hashes."""
    from workbench.util.io import read_json

    d = Path(run_dir)
    if (d / CARD_FILE).is_file():
        card = read_json(d / CARD_FILE, what="eval card")
        if isinstance(card, dict):
            return card
    config = read_json(d / "config.json", what="run config")
    if not isinstance(config, dict):
        raise ValueError(f"{d / 'config.json'}: not a JSON object")
    try:
        n = read_json(d / "metrics.json", what="run metrics").get("n_examples")
    except (OSError, ValueError, AttributeError):
        n = None
    return build_card(config, hashes=False, n_questions=n)


def _get(card: dict[str, Any], path: str) -> Any:
    node: Any = card
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _paths(a: dict[str, Any], b: dict[str, Any], methods: Iterable[tuple[str, str]]) -> list[tuple[str, str, str]]:
    out = []
    for key in SCORE_KEYS:
        if key.startswith("methods.*."):
            rest = key[len("methods.*."):]
            out += [(f"methods.{ma}.{rest}" if ma == mb else f"methods.{ma}|{mb}.{rest}",
                     f"methods.{ma}.{rest}", f"methods.{mb}.{rest}") for ma, mb in methods]
        else:
            out.append((key, key, key))
    return out


def differences(a: dict[str, Any], b: dict[str, Any], methods: Iterable[tuple[str, str]] = ()) -> list[tuple[str, Any, Any]]:
    """``(setting, value in a, value in b)`` for every setting of :data:`SCORE_KEYS` the two cards disagree on;
    ``methods``: the (method in a, method in b) pairs compared, whose protocol and prompt are checked. A hash only one
    card has (a run from before cards) is not a difference."""
    out = []
    for name, pa, pb in _paths(a, b, methods):
        va, vb = _get(a, pa), _get(b, pb)
        if name.endswith("sha256") and (va is None or vb is None):
            continue
        if name.startswith("methods.") and name.endswith(".protocol") and isinstance(va, dict) and isinstance(vb, dict):
            va = {k: v for k, v in va.items() if k != "name"}  # two methods may share every argument
            vb = {k: v for k, v in vb.items() if k != "name"}
        if isinstance(va, dict) and isinstance(vb, dict):  # each argument that differs, on its own
            out += [(f"{name}.{k}", va.get(k), vb.get(k)) for k in sorted(set(va) | set(vb), key=str)
                    if va.get(k) != vb.get(k)]
        elif va != vb:
            out.append((name, va, vb))
    return out


def _short(v: Any) -> str:
    s = json.dumps(v, default=str, sort_keys=True) if not isinstance(v, str) else v
    return s if len(s) <= 60 else s[:57] + "..."


def describe(diffs: list[tuple[str, Any, Any]]) -> str:
    """The differences as one line: ``setting a → b; ...``."""
    return "; ".join(f"{k} {_short(a)} vs {_short(b)}" for k, a, b in diffs)


def card_rows(card: dict[str, Any]) -> list[tuple[str, str]]:
    """The card flattened for a view: ``(setting, value)`` with dotted names, hashes shortened to 12 characters."""
    from workbench.rl.trackers import flatten

    out = []
    for key, node in flatten(card, sep=".").items():
        if node is None:
            continue
        text = node if isinstance(node, str) else json.dumps(node, default=str)
        out.append((key, text[:12] if key.endswith("sha256") else text))
    return out
