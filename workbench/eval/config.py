"""``EvalConfig``: what one evaluation run evaluates, written once.

The attribute docstrings below are the documentation of ``run_eval``'s options *and* the
``--help`` text of ``workbench eval`` (read with :func:`field_docs`), so the two cannot drift.

    >>> cfg = EvalConfig(methods="direct, search_r1", limit=2)
    >>> cfg.methods, cfg.rollout_config().max_turns
    (('direct', 'search_r1'), 4)
    >>> corpus_setting(EvalConfig(dataset="musique_dev.jsonl", corpus="per-question"))
    'per-question'
    >>> EvalConfig(methods="search-r1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown method 'search-r1'; valid methods: direct, dspo, dynasearcher, ircot, ...
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from workbench.core.choices import RolloutEngine
from workbench.protocols.base import protocol_takes

if TYPE_CHECKING:
    from workbench.methods import Method
    from workbench.protocols.base import Protocol
    from workbench.rollout.engine import RolloutConfig

DEFAULT_MODEL = "smollm2-135m"


#: The suffix of a method evaluated with the ``--adapter`` (``search_r1+lora``); the plain name is the same model
#: with the adapter disabled.
TRAINED = "+lora"

#: The method a question goes to unless another is named: the Search-R1 agent with the shipped trained adapter.
DEFAULT_METHOD = f"search_r1{TRAINED}"

#: :class:`EvalConfig` fields that mean something for one question (``workbench ask``'s flags); the others (dataset,
#: limit, split, group size...) are an evaluation's.
ASK_FIELDS = ("model", "adapter", "corpus", "retriever", "index", "encoder", "query_prefix", "pooling", "retrieval_url",
              "kg", "protocol_kwargs", "max_turns", "max_new_tokens", "temperature", "seed", "device",
              "rollout_engine", "batch_mib", "allow_pickle_weights", "override_adapter")


@dataclass(frozen=True)
class EvalEntry:
    """One method as an evaluation rolls it out, resolved once from the name given (``--method``): the method,
    whether it runs with the ``--adapter`` (the name ends in ``+lora``: the one place that suffix is read), and its
    protocol built with the method's arguments and the eval's ``protocol_kwargs`` (those it takes)."""

    label: str
    """The name given, e.g. ``search_r1+lora``: the method column of the run's tables."""
    method: Method
    trained: bool
    protocol: Protocol

    @classmethod
    def parse(cls, name: str, protocol_kwargs: dict[str, Any] | None = None) -> EvalEntry:
        """``"search_r1+lora"`` -> search_r1 with the adapter (a one-line error for an unknown name).

        >>> e = EvalEntry.parse("search_r1+lora", {"observation_mode": "chat"})
        >>> e.method.name, e.trained, e.protocol.config()["observation_mode"]
        ('search_r1', True, 'chat')
        """
        from workbench.methods import METHODS

        base, trained = (name[: -len(TRAINED)], True) if name.endswith(TRAINED) else (name, False)
        if base not in METHODS:
            raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)} "
                             f"(each also as NAME{TRAINED}: with the --adapter)")
        method = METHODS[base]
        return cls(name, method, trained, method.get_protocol(**protocol_takes(method.protocol, protocol_kwargs or {})))

    @property
    def rubric(self) -> Any:
        """The method's reward (its preset with its parameters), scored beside its rows; None for a baseline."""
        return self.method.rubric() if self.method.reward is not None else None


def parse_methods(methods: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``"direct,search_r1"`` or a list -> a tuple of method names (order kept, repeats dropped; unknown names are
    refused by :meth:`EvalEntry.parse`).

    >>> parse_methods(" direct ,search_r1,direct")
    ('direct', 'search_r1')
    """
    items = methods.split(",") if isinstance(methods, str) else list(methods)
    names = tuple(dict.fromkeys(str(m).strip() for m in items if str(m).strip()))
    if not names:
        from workbench.methods import method_names

        raise ValueError(f"no method given; valid methods: {', '.join(method_names())}")
    return names


@dataclass
class EvalConfig:
    """Options of an evaluation run (``workbench eval`` flags; ``run_eval`` keyword arguments)."""

    methods: tuple[str, ...] = ("direct", "search_r1")
    """Method name(s) to evaluate, comma-separated (``workbench methods`` lists them with their papers),
    e.g. direct, search_r1, dynasearcher, rsearch_evidence, dspo, rsearch_dag, when_to_search, vanilla_rag,
    iter_retgen, ircot."""

    dataset: str = "world"
    """``world`` (the synthetic multi-hop world), a dataset name found by ``load_dataset`` (hotpotqa,
    2wiki, musique, bamboogle), or a path to a benchmark file (HotpotQA, 2Wiki, MuSiQue, Bamboogle,
    FlashRAG JSONL)."""

    model: str = DEFAULT_MODEL
    """Model alias, local path (directory or .gguf) or an HF id already in the local cache."""

    limit: int | None = None
    """Evaluate the first N questions of the split (None: all of them)."""

    split: str | None = None
    """World split (train, dev, test; default dev). For a file: the split label (default: guessed
    from the file name)."""

    retriever: str = "bm25"
    """Passage search: bm25, or dense (chromadb + all-MiniLM-L6-v2; or a faiss ``index``)."""

    index: str | None = None
    """A faiss index of the corpus (row i = passage i of ``corpus``; Search-R1's ``e5_Flat.index`` over
    ``wiki-18.jsonl``) that dense search uses instead of building one; memory-mapped where its type allows, the
    JSONL corpus read on demand. Needs ``retriever`` dense and ``encoder`` the model the index was built with."""

    encoder: str | None = None
    """Dense search's sentence encoder: a local path or cached HF name (None: the bundled all-MiniLM-L6-v2)."""

    query_prefix: str | None = None
    """Text put before each dense query (None: ``query: `` for an e5 encoder, else none)."""

    pooling: str | None = None
    """How the encoder pools token vectors, instead of its folder's own: mean (Search-R1's for e5), cls (bge), max,
    lasttoken."""

    corpus: str | None = None
    """What the search tool searches: a corpus file (FlashRAG JSONL, HippoRAG-style JSON array of
    {title, text}, or a {title: sentences} object); pooled (one index over the context paragraphs of
    all the file's questions: the open setting, the default for a benchmark file); or per-question
    (each question searches only its own 10-20 paragraphs: the HotpotQA-distractor / MuSiQue
    setting). Default for the world: its passages."""

    retrieval_url: str | None = None
    """A running ``workbench serve-retrieval`` (``http://host:port``) the methods' search / kg / plan tools call
    instead of an index built in this process (several evals then share one index). It should serve the corpus
    the questions are asked over; the run records the URL and the server's passage count. Checked before the
    model loads; not with ``--corpus per-question``."""

    format: str | None = None
    """Layout of the question file, instead of detecting it: ircot, musique, 2wiki, hotpotqa,
    flashrag, qa (plain question / answer records such as R1-Searcher's)."""

    kg: tuple[str, ...] | None = None
    """Knowledge-graph files for the kg tool (dynasearcher): a Wikidata5M folder or its files, CoDEx
    triples with entities / relations JSON, or FB15k-237 triples with entity2text / relation2text
    (give the label files too, or names will not match). Default: the world's graph (world only)."""

    group_size: int = 1
    """Rollouts per question (G); more than 1 needs temperature > 0 to differ."""

    temperature: float = 0.0  # greedy: evaluation, not exploration
    """Sampling temperature (0 = greedy)."""

    max_turns: int = 4  # R-Search uses 4 turns
    """Policy turns per trajectory (each search is a turn); methods without tools (direct) get 1."""

    max_new_tokens: int = 256
    """Tokens per policy turn."""

    seed: int = 0
    """Sampling seed."""

    device: str = "auto"
    """cpu, cuda, or auto (CUDA when available)."""

    skip_unavailable: bool = False
    """Skip (with a message) methods whose tools the dataset cannot provide (e.g. dynasearcher's
    knowledge graph outside the world) instead of stopping with an error."""

    protocol_kwargs: dict[str, Any] = field(default_factory=dict)
    """Protocol arguments over each method's declared ones, for the methods whose protocol takes them, e.g.
    ``{"observation_mode": "chat"}`` (observations as user turns: what ``workbench train`` and ``sft`` use by
    default, so an adapter trained there is evaluated on the layout it learned)."""

    adapter: str | None = None
    """A trained LoRA adapter (an adapter directory, or an sft/train run: its newest checkpoint). Methods
    named ``M+lora`` are rolled out with it, plain ``M`` with it disabled: ``--method search_r1,search_r1+lora``
    compares trained and untrained in one run."""

    batch_mib: int | None = None
    """Memory budget (MiB) of the keys/values of one generation batch of the HF backend: a turn's prompts are split
    into batches that fit (None: 256 MiB on a CPU, which keeps a real-data eval of the default model under 2 GB;
    larger batches are faster where memory allows; no limit on an accelerator)."""

    rollout_engine: RolloutEngine = "auto"
    """What generates the rollouts from a loaded model (``workbench.rollout.backends.quant``): ``fp32`` (the exact HF
    backend), ``int4`` (int4 weights for decode steps, bf16 for prefill, the adapter unmerged; on a CPU), ``graph``
    (the LoRA merged for each call and the decode step replayed as a CUDA graph; on CUDA), ``auto`` (``graph`` on CUDA,
    ``int4`` on a CPU with native bf16 or the C decode step's vector kernels, else ``fp32``)."""

    allow_pickle_weights: bool = False
    """Load a model directory that has only pickle weights (``pytorch_model.bin``). Pickle files can run
    code when loaded: only for files you trust (default: safetensors only)."""

    override_adapter: bool = False
    """Keep the values given (``--protocol-kwargs``, ``--max-turns``, ``--max-new-tokens``, ``--model``, the method's
    protocol) where they contradict what the ``--adapter`` was trained with (its ``provenance.json``, or its run's
    ``config.json``); without it each contradiction is an error naming both values. Values not given are taken from
    the adapter either way (:mod:`workbench.rl.adapter_settings`)."""

    report_to: str = "none"
    """Experiment trackers that get a copy of the finished run, comma-separated: tensorboard, wandb, mlflow, trackio
    (or none), each offline into the run directory (``workbench.rl.trackers``; the library is an extra: ``pip install
    -e '.[tensorboard]'`` ...): the config, metrics.json's numbers, and a completions table per method."""

    def __post_init__(self) -> None:
        self.methods = parse_methods(self.methods)
        from workbench.rollout.backends import ENGINES

        if self.rollout_engine not in ENGINES:
            raise ValueError(f"unknown --rollout-engine {self.rollout_engine!r}; valid: {', '.join(ENGINES)}")
        if self.batch_mib is not None and self.batch_mib < 1:
            raise ValueError(f"batch_mib must be >= 1 (MiB of keys/values per generation batch), got {self.batch_mib}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1 (the number of questions to evaluate; None = all), got {self.limit}")
        from workbench.tools.toolbox import RETRIEVERS

        if self.retriever not in RETRIEVERS:
            raise ValueError(f"unknown retriever {self.retriever!r}; valid: {', '.join(RETRIEVERS)}")
        dense = {k: v for k, v in (("index", self.index), ("encoder", self.encoder), ("query_prefix", self.query_prefix),
                                   ("pooling", self.pooling)) if v is not None}
        if dense and self.retriever != "dense":
            raise ValueError(f"--{next(iter(dense)).replace('_', '-')} is for dense search: add --retriever dense")
        if dense and self.retrieval_url is not None:
            raise ValueError(f"--{next(iter(dense)).replace('_', '-')} and --retrieval-url: the server's own index and "
                             "encoder answer the searches; give them to `workbench serve-retrieval`, or drop --retrieval-url")
        if self.index is not None and (self.corpus or "").strip() in CORPUS_SETTINGS:
            raise ValueError(f"--index {self.index} holds the vectors of one corpus: pass that corpus file with --corpus "
                             f"(not {self.corpus})")
        if self.pooling is not None:
            from workbench.tools.dense import POOLING

            if self.pooling not in POOLING:
                raise ValueError(f"unknown --pooling {self.pooling!r}; valid: {', '.join(POOLING)}")
        if self.retrieval_url is not None:
            from workbench.tools.remote import base_url

            self.retrieval_url = base_url(self.retrieval_url)
            if (self.corpus or "").strip() == "per-question":
                raise ValueError("--retrieval-url serves one corpus, but --corpus per-question gives each question its "
                                 "own passages: drop one of the two")
        if not str(self.dataset).strip():
            raise ValueError("dataset is empty: pass 'world', a dataset name or a file path")
        if self.format is not None:
            from workbench.data.records import LAYOUTS

            if self.format not in LAYOUTS:
                raise ValueError(f"unknown --format {self.format!r}; valid: {', '.join(LAYOUTS)}")
        if isinstance(self.kg, str):
            self.kg = (self.kg,)
        if self.kg is not None:
            self.kg = tuple(str(k) for k in self.kg) or None
        if isinstance(self.protocol_kwargs, str):
            import json

            try:
                self.protocol_kwargs = json.loads(self.protocol_kwargs or "{}")
            except json.JSONDecodeError as e:
                raise ValueError(f"--protocol-kwargs is not JSON ({e}): e.g. '{{\"observation_mode\": \"chat\"}}'") from None
        if not isinstance(self.protocol_kwargs, dict):
            raise ValueError(f"--protocol-kwargs must be a JSON object, got {self.protocol_kwargs!r}")
        from workbench.rl.adapter_settings import protocol_kwargs_error

        error = protocol_kwargs_error(self.protocol_kwargs)  # the rules an adapter's recorded arguments keep too
        if error:
            raise ValueError(f"--protocol-kwargs {error}")
        self.entries = [EvalEntry.parse(m, self.protocol_kwargs) for m in self.methods]
        """The methods resolved once (:class:`EvalEntry`), in order."""
        if self.protocol_kwargs:
            used = {k for e in self.entries for k in protocol_takes(e.method.protocol, self.protocol_kwargs)}
            unused = sorted(set(self.protocol_kwargs) - used)
            if unused:
                raise ValueError(f"--protocol-kwargs {unused} is taken by none of the methods {', '.join(self.methods)}"
                                 " (workbench methods NAME shows a method's protocol arguments)")
        lora = [e.label for e in self.entries if e.trained]
        if lora and not self.adapter:
            raise ValueError(f"method {lora[0]!r} needs --adapter DIR (a LoRA adapter or an sft/train run)")
        if self.adapter and not lora:
            raise ValueError(f"--adapter {self.adapter} is given but no method is named M{TRAINED} to use it "
                             f"(e.g. --method search_r1,search_r1{TRAINED})")
        if self.adapter:
            from workbench.eval.adapters import resolve_adapter

            resolve_adapter(self.adapter)  # a bad path fails now, before any data or model is loaded
        from workbench.rl.trackers import tracker_names

        self.report_to = ",".join(tracker_names(self.report_to)) or "none"  # a library not installed: named now
        self.rollout_config()  # validates group_size, max_turns, max_new_tokens, temperature

    def rollout_config(self, max_turns: int | None = None) -> RolloutConfig:
        from workbench.rollout.engine import RolloutConfig

        return RolloutConfig(
            group_size=self.group_size,
            max_turns=self.max_turns if max_turns is None else max_turns,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            seed=self.seed,
        )

    def dense_encoder(self) -> Any:
        """The dense search's encoder with this config's prefix and pooling (loaded once), or None: the default."""
        if self.retriever != "dense" or (self.encoder, self.query_prefix, self.pooling) == (None, None, None):
            return None
        from workbench.tools.dense import load_encoder

        return load_encoder(self.encoder, self.device if self.device != "auto" else None,
                            query_prefix=self.query_prefix, pooling=self.pooling)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["methods"] = list(self.methods)
        d["kg"] = list(self.kg) if self.kg else None
        return d


def with_adapter_settings(methods: str | list[str] | tuple[str, ...], options: dict[str, Any],
                          model: str | None = None) -> tuple[dict[str, Any], str | None]:
    """``options`` (the :class:`EvalConfig` values given; absent = not given) with the settings ``options["adapter"]``
    was trained with filled in for its ``M+lora`` methods: the protocol arguments their protocol takes and the turn
    budget (:class:`~workbench.rl.adapter_settings.AdapterSettings`), and a one-line note of what was applied (None:
    nothing). A given value, ``model`` or a ``+lora`` method's protocol that contradicts the adapter is a one-line
    error unless ``options["override_adapter"]`` (a text there names who keeps the values, in the note)."""
    given_override = options.get("override_adapter")
    # a caller that keeps its own values on purpose names itself (the demo's turn budget), so the note does not say a
    # flag the user never passed
    by = given_override if isinstance(given_override, str) else None
    if by is not None:
        options = {**options, "override_adapter": True}
    adapter = options.get("adapter")
    trained = [EvalEntry.parse(m) for m in parse_methods(methods) if m.endswith(TRAINED)] if adapter else []
    if not trained:  # no adapter, or no method uses it: EvalConfig names that problem
        return options, None
    from workbench.eval.adapters import resolve_adapter
    from workbench.rl.adapter_settings import adapter_settings

    resolve_adapter(adapter)  # a bad path: the one-line error, before the settings are looked for
    settings = adapter_settings(adapter)
    override = bool(options.get("override_adapter"))
    notes = []
    for e in trained:  # each +lora method's protocol against the adapter's
        _, note = settings.apply({"protocol": e.method.protocol.name}, ("protocol",), override=override, by=by)
        notes.append(note)

    def takes(kwargs: dict[str, Any]) -> dict[str, Any]:
        return {k: v for e in trained for k, v in protocol_takes(e.method.protocol, kwargs).items()}

    given = {**options, "model": model} if model is not None else dict(options)
    if isinstance(given.get("protocol_kwargs"), str):  # JSON text, as EvalConfig takes it
        import json

        try:
            given["protocol_kwargs"] = json.loads(given["protocol_kwargs"] or "{}")
        except json.JSONDecodeError:
            return options, None  # EvalConfig names the bad JSON
    out, note = settings.apply(given, ("model", "protocol_kwargs", "max_turns", "max_new_tokens"), override=override,
                               takes=takes, by=by)
    if "model" not in options:  # compared only, not an option to pass on
        out.pop("model", None)
    notes = [n.replace(f"adapter {settings.path}: ", "") for n in [*notes, note] if n]
    return out, (f"adapter {settings.path}: " + "; ".join(notes)) if notes else None


#: ``--corpus`` values that are settings rather than files.
CORPUS_SETTINGS = ("pooled", "per-question")


def corpus_setting(cfg: EvalConfig) -> str:
    """How questions are searched: ``world`` (the world's passages), ``pooled`` (one index over all the
    questions' paragraphs), ``per-question`` (each question only its own paragraphs) or ``file``."""
    corpus = (cfg.corpus or "").strip()
    if corpus in CORPUS_SETTINGS:
        return corpus
    if corpus:
        return "file"
    return "world" if str(cfg.dataset).lower() == "world" else "pooled"


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass, one line each: field name -> text.

    >>> field_docs(EvalConfig)["seed"]
    'Sampling seed.'
    """
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for prev, node in zip(body, body[1:]):
        if (isinstance(prev, ast.AnnAssign) and isinstance(prev.target, ast.Name) and isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            docs[prev.target.id] = " ".join(node.value.value.split())
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in docs.items() if k in names}
