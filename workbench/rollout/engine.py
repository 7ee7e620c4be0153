"""The multi-turn rollout engine shared by every protocol (token-in, token-out).

For each example the engine builds the prompt ids once (chat template), then loops:
generate until a stop string / EOS / token limit -> parse the turn into an action ->
run the tool -> encode the observation once and append its ids -> continue. All active
sequences of all groups are generated together in one batched ``generate`` call per turn (at most as many at once as
the backend's kept key/value caches hold, :func:`rollout_slots`; a finished one's place goes to the next waiting).

What the trajectory keeps is exactly what was sampled: the policy turn ids and logprobs
come from the backend untouched; observation ids come from encoding the observation text
once. The loss mask is 1 on policy tokens and 0 on observation (and prompt) tokens; the
attention mask is untouched (observations stay visible to the model).
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from workbench.core.trajectory import OBSERVATION, POLICY, Trajectory, Turn
from workbench.data.example import Example
from workbench.protocols.base import ANSWER, INVALID, SEARCH, Observation, Protocol
from workbench.rollout.backends.base import EOS, ERROR, Backend, Generation, SamplingParams, encode_chat
from workbench.tools.base import Toolbox, neutralize_special_tokens
from workbench.util.textsafe import clean_text

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass
class RolloutConfig:
    """Budgets and sampling for a rollout."""

    group_size: int = 1
    """Rollouts per question (G); a group is generated as one batch."""
    max_turns: int = 4
    """Policy turns per trajectory (each search is a turn; R-Search uses 4, When-to-Search 5)."""
    max_new_tokens: int = 256
    """Tokens per policy turn."""
    max_total_tokens: int = 4096
    """Prompt + response tokens per trajectory."""
    temperature: float = 1.0  # DynaSearcher / DSPO rollouts
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("group_size", "max_turns", "max_new_tokens", "max_total_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"RolloutConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.temperature < 0:
            raise ValueError(f"RolloutConfig.temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"RolloutConfig.top_p must be in (0, 1], got {self.top_p}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def chat_delta(tokenizer: PreTrainedTokenizerBase) -> tuple[str, str]:
    """The template text around an observation delivered as a user turn.

    Returns ``(close_assistant_open_user, close_user_open_assistant)``, found by rendering
    a marker conversation with the tokenizer's chat template (works for any template).
    """
    cached = getattr(tokenizer, "_workbench_chat_delta", None)
    if cached is not None:
        return cached
    a, u = "\u2063WB_ASSISTANT\u2063", "\u2063WB_USER\u2063"
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": a},
        {"role": "user", "content": u},
    ]
    text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    a_end, u_start = text.index(a) + len(a), text.index(u)
    delta = (text[a_end:u_start], text[u_start + len(u) :])
    try:
        tokenizer._workbench_chat_delta = delta
    except AttributeError:  # pragma: no cover - tokenizers without attribute support
        pass
    return delta


class _State:
    __slots__ = ("traj", "example", "done", "repeat")

    def __init__(self, traj: Trajectory, example: Example):
        self.traj, self.example, self.done = traj, example, False
        self.repeat = 0  # the how-many-th time its question came up in the call (0: the first)

    @property
    def length(self) -> int:
        return len(self.traj.prompt_ids) + sum(len(t.token_ids) for t in self.traj.turns)

    def all_ids(self) -> list[int]:
        return self.traj.token_ids


def sample_seed(seed: int, example_id: str, sample_idx: int, turn: int, repeat: int = 0) -> int:
    """The seed of one policy turn's draws: the run's seed, the question, its sample index in the group, the turn,
    and (for a question given more than once) which time it is. A turn samples the same tokens from the same
    logits whatever else is batched with it, on every backend that takes row seeds; 31 bits, which every server's
    ``seed`` field holds.

    >>> sample_seed(0, "q1", 0, 0) == sample_seed(0, "q1", 0, 0) != sample_seed(0, "q1", 1, 0)
    True
    """
    key = f"{int(seed)}\x00{example_id}\x00{int(repeat)}\x00{int(sample_idx)}\x00{int(turn)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 33


def build_prompt_ids(protocol: Protocol, tokenizer: PreTrainedTokenizerBase, example: Example) -> list[int]:
    return encode_chat(tokenizer, protocol.messages(example))


def rollout(
    examples: list[Example],
    protocol: Protocol,
    toolbox: Toolbox,
    backend: Backend,
    config: RolloutConfig | None = None,
    progress: bool = True,
    meta: dict[str, Any] | None = None,
    prompt_ids: list[list[int]] | None = None,
    on_turn: Callable[[Trajectory, Turn], None] | None = None,
) -> list[Trajectory]:
    """Roll out ``config.group_size`` trajectories per example; returns them grouped in order.

    ``prompt_ids``: one per example, used instead of encoding ``protocol.messages(example)`` (a trainer that hands
    over its own prompts, e.g. TRL's rollout function in ``workbench.integrations.trl``).
    ``on_turn(trajectory, turn)`` is called with each turn as soon as it is appended (a policy turn when its
    generation ended, parsed; the observation once its tool answered), e.g. to show a rollout as it happens
    (``workbench ask``); the trajectory is still open then (no ``finish_reason`` or flags yet).
    """
    from tqdm.auto import tqdm

    cfg = config or RolloutConfig()
    tok = backend.tokenizer
    eos = backend.eos_token_ids()
    states: list[_State] = []
    if prompt_ids is not None and len(prompt_ids) != len(examples):
        raise ValueError(f"rollout: {len(prompt_ids)} prompt_ids for {len(examples)} examples")
    times: dict[str, int] = {}  # a question given twice draws apart the second time (``_State.repeat``)
    for i, ex in enumerate(examples):
        ids = build_prompt_ids(protocol, tok, ex) if prompt_ids is None else list(prompt_ids[i])
        prompt_text = tok.decode(ids, skip_special_tokens=False)
        k = times[ex.id] = times.get(ex.id, -1) + 1
        for g in range(cfg.group_size):
            states.append(start_trajectory(ex, protocol, toolbox, tok, cfg, g, ids, prompt_text, meta))
            states[-1].repeat = k
    if on_turn is not None:  # a protocol's own retrieval before the first turn (pipeline baselines)
        for s in states:
            for t in s.traj.turns:
                on_turn(s.traj, t)

    # one tick per finished trajectory (all of a turn's sequences are generated together, so ticks come at turn
    # ends); the postfix says which turn runs and the generation throughput so far
    label = (meta or {}).get("method") or protocol.name  # the eval's method ("search_r1+lora"), else the protocol
    bar = tqdm(total=len(states), desc=f"rollout {label}", unit="traj", disable=not progress, leave=False)
    bar.update(sum(s.done for s in states))
    gen_tokens, gen_seconds = 0, 0.0
    # at most `slots` trajectories generate at once; one that finishes gives its place to the next waiting one
    # before the next call, so the calls stay full instead of emptying as their rows answer
    slots = rollout_slots(backend, cfg, states)
    waiting = deque(s for s in states if not s.done)
    active: list[_State] = []
    call_idx = 0
    while waiting or active:
        while waiting and (slots is None or len(active) < slots):
            active.append(waiting.popleft())
        limits = [min(cfg.max_new_tokens, cfg.max_total_tokens - s.length) for s in active]
        params = SamplingParams(
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            stop=tuple(protocol.stop),
            seed=None if cfg.seed is None else cfg.seed * 1009 + call_idx,
            row_seeds=None if cfg.seed is None else tuple(
                sample_seed(cfg.seed, s.example.id, s.traj.sample_idx, len(s.traj.policy_turns), s.repeat)
                for s in active),
        )
        bar.set_postfix_str((f"{len(waiting)} waiting, " if waiting else "")
                            + f"call {call_idx + 1}, {len(active)} generating"
                            + (f", {gen_tokens / gen_seconds:.0f} tok/s" if gen_seconds > 0 else ""))
        t0 = time.perf_counter()
        try:
            gens = backend.generate([s.all_ids() for s in active], params, limits)
        except Exception as e:  # a backend failure ends these trajectories, recorded, not raised
            gens = [Generation([], [], ERROR, error=f"{type(e).__name__}: {e}") for _ in active]
        elapsed = time.perf_counter() - t0
        # a turn's latency is its own sequence's time (the backend's meta["seconds"]: until it finished), not a
        # share of the batch; a backend that does not time sequences gives the call's wall time, which each waited
        gen_tokens, gen_seconds = gen_tokens + sum(len(g.token_ids) for g in gens), gen_seconds + elapsed
        for s, g in zip(active, gens):
            seen = len(s.traj.turns)
            last_turn = len(s.traj.policy_turns) == cfg.max_turns - 1
            step_trajectory(s, g, float(g.meta.get("seconds", elapsed)), protocol, toolbox, tok, eos, cfg, last_turn,
                            on_turn)
            if on_turn is not None and len(s.traj.turns) > seen + 1:  # the observation, after its tool answered
                on_turn(s.traj, s.traj.turns[-1])
            if s.done or last_turn:
                bar.update(1)
        # a generation that does not finish its trajectory appends one policy turn: the turn limit counts them
        active = [s for s in active if not s.done and len(s.traj.policy_turns) < cfg.max_turns]
        call_idx += 1
    bar.set_postfix_str("")
    if gen_seconds > 0:
        bar.set_postfix_str(f"{gen_tokens} tokens, {gen_tokens / gen_seconds:.0f} tok/s")
    bar.close()
    backend.clear_cache()
    return [close_trajectory(s, protocol) for s in states]


#: Tokens a turn's observation is expected to add when sizing the slots (three world passages are ~200 tokens; a longer
#: one only means a cache pushed out early, which costs its prefill again, not a failure).
OBS_TOKENS = 256


def rollout_slots(backend: Backend, cfg: RolloutConfig, states: list[_State]) -> int | None:
    """How many trajectories may generate at once (``None``: all): as many as the backend keeps the key/value caches
    of (``Backend.rows_kept``) at the length a trajectory is expected to reach (its prompt plus, each turn,
    ``max_new_tokens`` and :data:`OBS_TOKENS`, at most ``max_total_tokens``). With more sequences than its cache
    holds, one turn-by-turn batch of all of them would push the earliest rows' caches out before their next turn, and
    each of those turns would prefill its whole context again (the 24- and 89-question evals on a CPU: over half their
    prefill; ``bench/RESULTS.md``, "Waves"). ``None`` when all fit, or when the backend keeps no caches or bounds them
    itself."""
    longest = max((s.length for s in states), default=0)
    expected = min(cfg.max_total_tokens, longest + cfg.max_turns * (cfg.max_new_tokens + OBS_TOKENS))
    kept = backend.rows_kept(expected)
    return None if kept is None or len(states) <= kept else kept


# The three steps of one trajectory, shared by ``rollout`` (all sequences batched per turn) and the verl agent loop
# (``workbench.integrations.verl.agent_loop``: one trajectory, one server call per turn): start -> step per turn ->
# close. Nothing here generates; the caller hands each turn's ``Generation`` to ``step_trajectory``.


def start_trajectory(ex: Example, protocol: Protocol, toolbox: Toolbox, tok: PreTrainedTokenizerBase,
                     cfg: RolloutConfig, sample_idx: int = 0, prompt_ids: list[int] | None = None,
                     prompt_text: str | None = None, meta: dict[str, Any] | None = None) -> _State:
    """Member ``sample_idx`` of ``ex``'s group: the prompt (encoded once) and the protocol's initial observation."""
    if prompt_ids is None:
        prompt_ids = build_prompt_ids(protocol, tok, ex)
    if prompt_text is None:
        prompt_text = tok.decode(prompt_ids, skip_special_tokens=False)
    traj = Trajectory(
        id=f"{ex.id}#{sample_idx}",
        example_id=ex.id,
        question=ex.question,
        protocol=protocol.name,
        prompt_ids=list(prompt_ids),
        prompt_text=prompt_text,
        group_id=ex.id,
        sample_idx=sample_idx,
        meta={"dataset": ex.dataset, "split": ex.split, "hops": ex.hops, "qtype": ex.qtype, **(meta or {})},
    )
    s = _State(traj, ex)
    _initial_observation(s, protocol, toolbox, tok, cfg)
    if s.length >= cfg.max_total_tokens:
        _finish(s, "budget")
    return s


def close_trajectory(s: _State, protocol: Protocol) -> Trajectory:
    """The finished trajectory (``max_turns`` if it was still running) with the protocol's format flags."""
    if not s.done:
        _finish(s, "max_turns")
    s.traj.flags = protocol.format_flags(s.traj)
    return s.traj


def _finish(s: _State, reason: str) -> None:
    s.done = True
    s.traj.finish_reason = reason


def step_trajectory(s: _State, g: Generation, latency: float, protocol: Protocol, toolbox: Toolbox,
                    tok: PreTrainedTokenizerBase, eos: set[int], cfg: RolloutConfig, last_turn: bool,
                    on_turn: Callable[[Trajectory, Turn], None] | None = None) -> None:
    """Append one sampled policy turn ``g`` (ids as sampled), parse and act on it, append the observation's ids.
    ``on_turn(trajectory, turn)`` sees the policy turn before its action runs."""
    traj = s.traj
    if g.finish_reason == ERROR:
        traj.meta.setdefault("errors", []).append(g.error)
        _finish(s, "backend_error")
        return
    text = clean_text(tok.decode(g.token_ids, skip_special_tokens=False))
    action = protocol.parse_in_context(clean_text(tok.decode(g.token_ids, skip_special_tokens=True)), traj)
    if action.kind == INVALID and g.finish_reason == "length" and not action.reason.startswith("empty"):
        action.reason = f"turn cut at {len(g.token_ids)} tokens without a complete action ({action.reason})"
    traj.turns.append(
        Turn(POLICY, text, list(g.token_ids), list(g.logprobs), g.finish_reason, action.to_dict(), latency_s=latency)
    )
    if on_turn is not None:
        on_turn(traj, traj.turns[-1])
    if action.kind == ANSWER:
        traj.answer = protocol.answer_text(action)
        _finish(s, "answer")
        return
    if s.length >= cfg.max_total_tokens:
        _finish(s, "budget")
        return
    if last_turn:
        return  # the caller marks it max_turns
    if g.finish_reason == EOS and protocol.observation_mode == "inline" and action.kind == INVALID:
        _finish(s, "eos")  # the model ended its message without acting
        return
    t0 = time.perf_counter()
    obs: Observation = protocol.act(action, toolbox, s.example) if action.kind == SEARCH else protocol.invalid_observation(action)
    _append_observation(s, obs, protocol, tok, g.token_ids, eos, cfg, t0)


def _special_tokens(tok: Any) -> tuple[str, ...]:
    """The tokenizer's special / added token strings (cached on it), longest first."""
    cached = getattr(tok, "_workbench_special_tokens", None)
    if cached is None:
        names = set(getattr(tok, "all_special_tokens", None) or [])
        names |= {str(t) for t in (getattr(tok, "get_added_vocab", lambda: {})() or {})}
        cached = tuple(sorted((n for n in names if n and not n.isspace()), key=len, reverse=True))
        try:
            tok._workbench_special_tokens = cached
        except AttributeError:  # pragma: no cover - tokenizers without attribute support
            pass
    return cached


def _initial_observation(s: _State, protocol: Protocol, toolbox: Toolbox, tok: Any, cfg: RolloutConfig) -> None:
    t0 = time.perf_counter()
    obs = protocol.initial_observation(s.example, toolbox)
    if obs is not None:
        _append_observation(s, obs, protocol, tok, [], set(), cfg, t0)


def _append_observation(s: _State, obs: Observation, protocol: Protocol, tok: Any, last_ids: list[int], eos: set[int],
                        cfg: RolloutConfig, t0: float) -> None:
    traj = s.traj
    # the tokenizer must not see invalid UTF-8 nor turn tool text into its special tokens
    obs_text = neutralize_special_tokens(clean_text(obs.text), _special_tokens(tok))
    if protocol.observation_mode == "chat" and last_ids:
        close_open, reopen = chat_delta(tok)
        if last_ids[-1] in eos:
            # the policy already closed its message with EOS: do not close it twice
            eos_text = tok.decode([last_ids[-1]], skip_special_tokens=False)
            if close_open.startswith(eos_text):
                close_open = close_open[len(eos_text) :]
        obs_text = close_open + obs_text.strip() + reopen
    obs_ids = tok.encode(obs_text, add_special_tokens=False)
    if s.length + len(obs_ids) >= cfg.max_total_tokens:
        if traj.turns:
            traj.turns[-1].tool_calls = obs.tool_calls  # keep the record of what was searched
        _finish(s, "budget")
        return
    traj.turns.append(
        Turn(OBSERVATION, obs_text, obs_ids, None, None, obs.action, obs.tool_calls, latency_s=time.perf_counter() - t0)
    )
