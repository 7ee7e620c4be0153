"""A verl agent loop that runs any workbench protocol with its toolbox (verl >= 0.9, ``verl/experimental/agent_loop``).

verl calls ``WorkbenchAgentLoop.run(sampling_params, **row)`` once per trajectory, with the dataset row's
non-tensor fields (``raw_prompt``, ``extra_info``, ``reward_model``, ``data_source``...). The loop is the
engine's own per-trajectory steps (:func:`workbench.rollout.engine.start_trajectory` → ``step_trajectory``
per turn → ``close_trajectory``): the protocol's parse / act / render run exactly as in ``workbench eval``
and ``workbench train``; only the generation goes through verl's server manager, token ids in and out:

- the prompt is ``raw_prompt`` encoded once with the chat template (``encode_chat``, as the engine does);
- each policy turn is ``server_manager.generate(request_id=..., prompt_ids=<all ids so far>,
  sampling_params={..., "max_tokens", "stop"})``; its ids (and logprobs) are kept as sampled, mask 1;
- each observation is encoded once and appended as ids with mask 0 (the engine's ``_append_observation``).

``extra_fields`` carries the trajectory for our features: ``workbench_trajectory`` (``Trajectory.to_dict()``:
turns, actions, tool calls with passage ids, flags, timings) and ``workbench`` (a flat summary: searches,
invalid actions, format flags, finish reason, tool and generation seconds), plus ``turn_scores`` /
``tool_rewards`` (empty) to keep the schema of verl's ``tool_agent`` loop.

Configuration: an agent-loop config file (``actor_rollout_ref.rollout.agent.agent_loop_config_path``, written by
``workbench export verl``) whose entry's keys are passed to ``__init__`` by ``hydra.utils.instantiate``::

    - name: workbench
      _target_: workbench.integrations.verl.agent_loop.WorkbenchAgentLoop
      method: search_r1        # or protocol: <name>
      corpus: world            # 'world' or a corpus file (each rollout worker builds its own index)
      retrieval_url: http://127.0.0.1:8000   # optional: call `workbench serve-retrieval` instead (corpus unused)
      retrieval_api_key: ${oc.env:WORKBENCH_RETRIEVAL_API_KEY,null}   # optional: its bearer token

Not yet run on GPUs: tested on CPU with verl's own classes and a server-manager stand-in over our HF backend
(:class:`BackendServerManager`), whose ids and masks equal the engine's for the same seed.
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
import time
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.workers.rollout.replica import TokenOutput

from workbench.core.trajectory import POLICY, Trajectory
from workbench.protocols.base import Protocol
from workbench.rollout.backends.base import (
    EOS,
    ERROR,
    LENGTH,
    STOP,
    Backend,
    Generation,
    SamplingParams,
    encode_chat,
    eos_ids,
    find_stop,
)
from workbench.rollout.engine import RolloutConfig, close_trajectory, sample_seed, start_trajectory, step_trajectory
from workbench.tools.base import Toolbox

_STOP_WINDOW = 16  # tokens decoded from the end of a turn to find which stop string ended it (as the HF backend)


@functools.lru_cache(maxsize=4)
def _protocol_and_toolbox(method: str | None, protocol: str | None, corpus: str, retriever: str,
                          retrieval_url: str | None = None, api_key: str | None = None) -> tuple[Protocol, Toolbox]:
    """The protocol and its toolbox, built once per rollout worker process (remote tools: one HTTP client)."""
    from workbench.tools.toolbox import build_toolbox

    if method:
        from workbench.methods import get_method

        proto = get_method(method).get_protocol()
    elif protocol:
        from workbench.methods import get_protocol

        proto = get_protocol(protocol)
    else:
        raise ValueError("WorkbenchAgentLoop needs method= or protocol= (keys of its agent-loop config entry)")
    if retrieval_url:
        from workbench.tools.remote import remote_toolbox

        return proto, remote_toolbox(proto, retrieval_url, api_key=api_key)
    if corpus == "world":
        from workbench.data.world import load_world

        return proto, build_toolbox(proto, load_world(), retriever=retriever)
    from workbench.data.corpora import load_corpus

    return proto, build_toolbox(proto, passages=load_corpus(corpus), retriever=retriever)


def generation_from_tokens(out: TokenOutput, tok: Any, eos: set[int], stops: tuple[str, ...], limit: int,
                           seconds: float) -> Generation:
    """verl's ``TokenOutput`` as the engine's ``Generation`` (finish reason from the ids: EOS, stop string, limit).

    A server that returns no logprobs gives NaN per token (unknown, never a made-up 0).
    """
    ids = [int(t) for t in out.token_ids]
    if out.stop_reason == "aborted":
        return Generation(ids, [math.nan] * len(ids), ERROR, error="generation aborted by the rollout server",
                          meta={"seconds": seconds})
    lps = [float(x) for x in out.log_probs] if out.log_probs else [math.nan] * len(ids)
    if len(lps) != len(ids):
        return Generation(ids, [math.nan] * len(ids), ERROR, meta={"seconds": seconds},
                          error=f"server returned {len(lps)} logprobs for {len(ids)} tokens")
    stop = find_stop(tok.decode(ids[-_STOP_WINDOW:]), stops) if stops else None
    if ids and ids[-1] in eos:
        reason = EOS
    elif stop is not None:
        reason = STOP
    elif len(ids) >= limit:
        reason = LENGTH
    else:
        reason = STOP  # the server stopped on its own (a stop token id): a complete turn
    return Generation(ids, lps, reason, stop_string=stop, meta={"seconds": seconds})


def agent_loop_output(traj: Trajectory, response_length: int, metrics: dict[str, Any], logprobs: bool) -> AgentLoopOutput:
    """A finished trajectory as verl's ``AgentLoopOutput``: response = turns' ids, mask 1 on policy tokens."""
    ids, mask, lps = [], [], []
    for t in traj.turns:
        ids += t.token_ids
        mask += [1 if t.kind == POLICY else 0] * len(t.token_ids)
        lps += list(t.logprobs) if t.kind == POLICY and t.logprobs is not None else [0.0] * len(t.token_ids)
    n_policy = sum(len(t.token_ids) for t in traj.turns if t.kind == POLICY)
    summary = {
        "finish_reason": traj.finish_reason, "answer": traj.answer, "flags": dict(traj.flags),
        "n_searches": traj.n_searches, "n_invalid": traj.n_invalid, "n_policy_tokens": n_policy,
        "searches": traj.searches, "latency_s": traj.latency_s, "tool_latency_s": traj.tool_latency_s,
        "truncated": len(ids) > response_length,
    }
    return AgentLoopOutput(
        prompt_ids=list(traj.prompt_ids), response_ids=ids[:response_length], response_mask=mask[:response_length],
        response_logprobs=lps[:response_length] if logprobs else None,
        num_turns=1 + len(traj.turns), metrics=metrics,
        extra_fields={"workbench": summary, "workbench_trajectory": traj.to_dict(), "turn_scores": [],
                      "tool_rewards": []},
    )


@register("workbench")
class WorkbenchAgentLoop(AgentLoopBase):
    """verl agent loop over a workbench protocol; see the module docstring.

    Args (from the agent-loop config entry; verl's own arguments go to ``AgentLoopBase``):
        method: a method name (its protocol with its arguments); or ``protocol``: a protocol name.
        corpus: ``world`` or a corpus file the toolbox searches.
        retrieval_url: ``http://host:port`` of a ``workbench serve-retrieval``: the protocol's tools call it
            (:mod:`workbench.tools.remote`) instead of building an index per worker; ``corpus`` is then unused.
        retrieval_api_key: that server's bearer token (default: ``$WORKBENCH_RETRIEVAL_API_KEY`` in the worker).
        retriever: ``bm25`` or ``dense``.
        max_turns: policy turns per trajectory (default: ``multi_turn.max_assistant_turns``, else the engine's 4).
        max_new_tokens: tokens per policy turn (default: the engine's 256; never past ``response_length``).
        seed: per-turn sampling seed ``seed * 1009 + turn`` as the engine's (every member of a group then
            samples the same: for tests and reproduction only; default None: the server's randomness).
    """

    def __init__(self, *args: Any, method: str | None = None, protocol: str | None = None, corpus: str = "world",
                 retriever: str = "bm25", retrieval_url: str | None = None, retrieval_api_key: str | None = None,
                 max_turns: int | None = None, max_new_tokens: int | None = None, seed: int | None = None,
                 tools: Any = None, **kwargs: Any):
        kwargs.pop("name", None)  # the config entry's own name
        super().__init__(*args, **kwargs)
        self.protocol, self.toolbox = _protocol_and_toolbox(method, protocol, str(corpus), retriever,
                                                            str(retrieval_url) if retrieval_url else None,
                                                            str(retrieval_api_key) if retrieval_api_key else None)
        self.response_length = int(self.rollout_config.response_length)
        default = RolloutConfig()
        turns = max_turns or self.rollout_config.multi_turn.get("max_assistant_turns") or default.max_turns
        self.max_new_tokens = min(int(max_new_tokens or default.max_new_tokens), self.response_length)
        self.turns, self.seed = int(turns), seed
        self.eos = _eos_ids(self.tokenizer, self.config.actor_rollout_ref.model.get("path"))

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any) -> AgentLoopOutput:
        from workbench.integrations.verl.export import example_from_verl

        messages = [dict(m) for m in kwargs["raw_prompt"]]
        example = example_from_verl(kwargs.get("extra_info"), (kwargs.get("reward_model") or {}).get("ground_truth"),
                                    kwargs.get("data_source"))
        if not example.question:
            example.question = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        prompt_ids = self._cap_text_prompt_length(await self.loop.run_in_executor(
            None, lambda: encode_chat(self.tokenizer, messages)))
        cfg = RolloutConfig(max_turns=self.turns, max_new_tokens=self.max_new_tokens,
                            max_total_tokens=len(prompt_ids) + self.response_length,
                            temperature=float(sampling_params.get("temperature", 1.0)),
                            top_p=float(sampling_params.get("top_p", 1.0)) or 1.0, seed=self.seed)
        s = start_trajectory(example, self.protocol, self.toolbox, self.tokenizer, cfg, prompt_ids=prompt_ids)
        request_id = f"det-{int(priority)}" if self.rollout_config.get("full_determinism", False) else uuid4().hex
        gen_s, tool_s, want_lps = 0.0, 0.0, bool(sampling_params.get("logprobs"))
        for turn in range(cfg.max_turns):
            if s.done:
                break
            limit = min(cfg.max_new_tokens, cfg.max_total_tokens - s.length)
            params = {**sampling_params, "max_tokens": limit, "stop": list(self.protocol.stop), **self._keep_stop()}
            if self.seed is not None:  # the engine's seed of this trajectory's turn (sample 0: verl repeats a prompt)
                params["seed"] = sample_seed(self.seed, example.id, 0, turn)
            t0 = time.perf_counter()
            try:
                out = await self.server_manager.generate(request_id=request_id, prompt_ids=s.all_ids(),
                                                         sampling_params=params)
                g = generation_from_tokens(out, self.tokenizer, self.eos, tuple(self.protocol.stop), limit,
                                           time.perf_counter() - t0)
            except Exception as e:  # a failed server call ends this trajectory, recorded, not raised
                g = Generation([], [], ERROR, error=f"{type(e).__name__}: {e}")
            gen_s += time.perf_counter() - t0
            t1 = time.perf_counter()
            # parse / act / render run in a thread (a tool call must not block the worker's event loop), one at a
            # time: the toolbox and tokenizer are shared by every trajectory of this worker process
            await asyncio.get_running_loop().run_in_executor(
                None, _locked_step, s, g, float(g.meta.get("seconds", 0.0)), self.protocol, self.toolbox,
                self.tokenizer, self.eos, cfg, turn == cfg.max_turns - 1)
            tool_s += time.perf_counter() - t1
        traj = close_trajectory(s, self.protocol)
        metrics = {"generate_sequences": gen_s, "tool_calls": tool_s, "num_preempted": -1}
        return agent_loop_output(traj, self.response_length, metrics, want_lps)

    def _keep_stop(self) -> dict[str, bool]:
        """Keep the stop string in the returned ids (the engine's turns end with it): vLLM and SGLang spell it
        differently."""
        name = str(self.rollout_config.get("name", ""))
        return {"no_stop_trim": True} if name == "sglang" else {"include_stop_str_in_output": True}


_STEP_LOCK = threading.Lock()


def _locked_step(*args: Any) -> None:
    with _STEP_LOCK:
        step_trajectory(*args)


def _eos_ids(tok: Any, model_path: Any) -> set[int]:
    """EOS ids of the tokenizer and of the model's generation config (which vLLM / SGLang stop at too)."""
    gen_config = None
    try:
        from transformers import GenerationConfig

        gen_config = GenerationConfig.from_pretrained(str(model_path), local_files_only=True)
    except Exception:  # no generation_config.json (or no path): the tokenizer's EOS only
        pass
    return eos_ids(tok, gen_config)


class BackendServerManager:
    """A stand-in for verl's ``LLMServerClient`` over any workbench backend (CPU tests, notebooks).

    ``generate(request_id=..., prompt_ids=..., sampling_params=...)`` → ``TokenOutput``, as verl's client;
    ``calls`` records each request's ``(prompt_ids, sampling_params)``.
    """

    def __init__(self, backend: Backend):
        self.backend, self.calls = backend, []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **_: Any) -> TokenOutput:
        sp = dict(sampling_params)
        self.calls.append((list(prompt_ids), sp))
        params = SamplingParams(max_new_tokens=int(sp.get("max_tokens", 256)), temperature=float(sp.get("temperature", 1.0)),
                                top_p=float(sp.get("top_p", 1.0)) or 1.0, stop=tuple(sp.get("stop") or ()),
                                seed=sp.get("seed"))
        g = (await asyncio.get_running_loop().run_in_executor(None, self.backend.generate, [list(prompt_ids)], params))[0]
        if g.finish_reason == ERROR:
            raise RuntimeError(g.error or "backend error")
        return TokenOutput(token_ids=list(g.token_ids), log_probs=list(g.logprobs) if sp.get("logprobs") else None,
                           stop_reason="completed")
