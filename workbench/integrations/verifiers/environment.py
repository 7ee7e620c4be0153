"""A workbench method as a ``verifiers`` 0.4.0 environment (``verifiers.v1``): what the package that
``workbench export verifiers`` writes imports. It loads in verifiers' own environment (``make verifiers-env``:
``.venv-verifiers``, this package installed there without its deps), never in ``.venv``.

:func:`build` reads an export's ``export.json`` and ``tasks.jsonl`` and returns the three plugin classes
verifiers resolves by the package's name (``vf-eval <package>``), plus ``load_environment``:

- the **taskset**: one task per exported question (``WorkbenchData.example``: the workbench ``Example``);
- the **harness**: the method's protocol as a multi-turn chat loop run in-process (verifiers' contract: every
  model call goes through the rollout's interception ``endpoint``, so the trace records each turn). The prompt
  is the protocol's own messages (system text, its demonstration as chat turns, the question); each assistant
  turn is parsed by the protocol (its tags), a search runs on the method's toolbox over the exported corpus and
  its rendered results come back as the next user turn (the protocol's ``observation_mode="chat"``, as
  ``workbench train`` rolls out), until an answer or the method's turn limit;
- the **rubric**: one ``@vf.reward`` per weighted component of the method's rubric, with its weight (so
  ``trace.reward`` is the workbench total, ``Σ weight·component``), a weight-0 component as a ``@vf.metric``
  (logged, not rewarded). Every component comes from one :class:`~workbench.rewards.from_text.TextScorer` pass
  over the trace's messages after the prompt, the passages resolved against the corpus: the arithmetic is the
  workbench's, not a copy.
"""

from __future__ import annotations

import asyncio
import functools
import json
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import verifiers.v1 as vf
from verifiers.v1.types import content_text

from workbench.core.trajectory import OBSERVATION, POLICY, Trajectory, Turn
from workbench.data.example import Example
from workbench.protocols.base import ANSWER, SEARCH, Protocol
from workbench.util.textsafe import clean_text

MANIFEST = "export.json"
TASKS = "tasks.jsonl"


class Spec:
    """An export's manifest, and what it names built once: the protocol, the toolbox, the rubric, the scorer."""

    def __init__(self, root: Path):
        from workbench.integrations.verifiers.export import read_manifest

        self.root = root
        m = read_manifest(root / MANIFEST)
        self.method, self.corpus = m["method"], m["corpus"]
        self.max_turns, self.max_new_tokens = int(m["max_turns"]), int(m["max_new_tokens"])
        self.weights: dict[str, float] = {k: float(v) for k, v in m["weights"].items()}

    @functools.cached_property
    def protocol(self) -> Protocol:
        from workbench.integrations.verifiers.export import chat_protocol

        return chat_protocol(self.method)

    @functools.cached_property
    def passages(self) -> Any:
        from workbench.integrations.verl.reward import corpus_index

        return corpus_index(self.corpus)

    @functools.cached_property
    def toolbox(self) -> Any:
        from workbench.tools.toolbox import build_toolbox

        if self.corpus == "world":
            from workbench.data.world import load_world

            return build_toolbox(self.protocol, load_world())
        return build_toolbox(self.protocol, passages=list(self.passages.values()))

    @functools.cached_property
    def scorer(self) -> Any:
        from workbench.methods import get_method
        from workbench.rewards.from_text import TextScorer

        rubric = get_method(self.method).rubric()
        if dict(rubric.weights) != self.weights:
            raise ValueError(f"{self.root / MANIFEST}: the export's weights {self.weights} are not the {self.method!r} "
                             f"rubric's {dict(rubric.weights)} in this workbench: export it again")
        return TextScorer(rubric, self.protocol, {"encoder": False, "cache": False, "passages": self.passages})

    def examples(self) -> list[Example]:
        path = self.root / TASKS
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return [Example.from_dict(r) for r in rows]

    def score(self, completion: Sequence[Mapping[str, Any]], example: Example) -> dict[str, float]:
        """Every component of the rubric (and ``total``) for the chat ``completion`` (the messages after the
        prompt) of ``example``."""
        table = self.scorer.score([list(completion)], [example], [example.question])
        return {"total": float(table.total[0]), **{n: float(table.frame[n].iloc[0]) for n in self.weights}}


def completion_messages(messages: Sequence[Any], n_prompt: int) -> list[dict[str, str]]:
    """A trace's messages after the prompt's ``n_prompt``, as ``{"role", "content"}`` text."""
    return [{"role": m.role, "content": content_text(m.content) or ""} for m in list(messages)[n_prompt:]]


async def run_protocol(spec: Spec, example: Example, endpoint: str, secret: str, model: str) -> Trajectory:
    """One rollout of ``example`` through the chat endpoint: the protocol's turns, its tools, its stop strings."""
    proto, toolbox = spec.protocol, spec.toolbox
    msgs = proto.messages(example)
    traj = Trajectory(id=example.id, example_id=example.id, question=example.question, protocol=proto.name,
                      prompt_ids=[], group_id=example.id)
    first = await asyncio.to_thread(proto.initial_observation, example, toolbox)
    if first is not None:
        traj.turns.append(Turn(OBSERVATION, first.text, [], None, None, first.action, first.tool_calls))
        msgs.append({"role": "user", "content": clean_text(first.text).strip()})
    url = endpoint.rstrip("/") + "/chat/completions"
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=30.0)) as client:
        for turn in range(spec.max_turns):
            body = {"model": model, "messages": msgs, "stop": list(proto.stop), "max_tokens": spec.max_new_tokens,
                    "include_stop_str_in_output": True}
            r = await client.post(url, json=body, headers={"Authorization": f"Bearer {secret}"})
            if r.status_code >= 400:
                raise vf.HarnessError(f"model call {turn + 1} of {example.id!r} failed: HTTP {r.status_code}: "
                                      f"{r.text[:400]}")
            choice = r.json()["choices"][0]
            text = clean_text(choice["message"].get("content") or "")
            stop = choice.get("stop_reason")
            if isinstance(stop, str) and stop in proto.stop and not text.endswith(stop):
                text += stop  # a server that left the stop string out: the protocol's tags need it
            msgs.append({"role": "assistant", "content": text})
            action = proto.parse_in_context(text, traj)
            traj.turns.append(Turn(POLICY, text, [], None, choice.get("finish_reason"), action.to_dict()))
            if action.kind == ANSWER:
                traj.answer = proto.answer_text(action)
                traj.finish_reason = "answer"
                break
            if turn == spec.max_turns - 1:
                traj.finish_reason = "max_turns"
                break
            act = proto.act if action.kind == SEARCH else (lambda a, *_: proto.invalid_observation(a))
            obs = await asyncio.to_thread(act, action, toolbox, example)
            traj.turns.append(Turn(OBSERVATION, obs.text, [], None, None, obs.action, obs.tool_calls))
            msgs.append({"role": "user", "content": clean_text(obs.text).strip()})
    traj.flags = proto.format_flags(traj)
    return traj


class WorkbenchData(vf.TaskData):
    """One exported question: the workbench ``Example`` (id, question, gold answers, hops, supporting passages)."""

    example: dict[str, Any]


def build(root: str | Path, package: str) -> dict[str, Any]:
    """The taskset, harness and task classes of the export at ``root`` (the package ``package``) and its
    ``load_environment``."""
    spec = Spec(Path(root))
    n_prompt = len(spec.protocol.messages(Example(id="n", question="n", answers=[])))

    def scores(trace: Any, data: WorkbenchData) -> dict[str, float]:
        cached = trace.info.get("workbench_scores")
        if cached is None:
            cached = spec.score(completion_messages(trace.messages, n_prompt), Example.from_dict(data.example))
            trace.info["workbench_scores"] = cached
        return cached

    def component(name: str, weight: float) -> Any:
        async def fn(self: Any, trace: Any) -> float:
            return scores(trace, self.data)[name]

        fn.__name__ = fn.__qualname__ = name
        return vf.reward(weight=weight)(fn) if weight else vf.metric(fn)

    hooks = {name: component(name, w) for name, w in spec.weights.items()}
    attrs = {"__doc__": f"A question of the {spec.method!r} export; its rewards are the method's rubric components.",
             "__module__": __name__, **hooks}
    task_cls = types.new_class("WorkbenchTask", (vf.Task[WorkbenchData],), exec_body=lambda ns: ns.update(attrs))

    class WorkbenchTaskset(vf.Taskset[task_cls, vf.TasksetConfig]):  # type: ignore[valid-type]
        __doc__ = f"The questions exported with the workbench method {spec.method!r}."

        def load(self) -> list[Any]:
            return [task_cls(WorkbenchData(id=ex.id, name=ex.id, prompt=spec.protocol.user_prompt(ex),
                                           example=ex.to_dict())) for ex in spec.examples()]

    class WorkbenchHarness(vf.Harness[vf.HarnessConfig]):
        __doc__ = f"The {spec.method!r} protocol's turns and tools, run in-process against the rollout's endpoint."
        APPENDS_SYSTEM_PROMPT = True
        EXECUTES_CODE = False
        NEEDS_CONTAINER = False

        async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str,
                         mcp_urls: dict[str, str], data: Any) -> Any:
            example = Example.from_dict(dict(data.example))
            traj = await run_protocol(spec, example, endpoint, secret, ctx.model)
            # what `workbench import verifiers` reads back: the method, the corpus, how the rollout ended
            trace.info["workbench"] = {"method": spec.method, "corpus": spec.corpus, "n_prompt": n_prompt,
                                       "finish_reason": traj.finish_reason}
            return vf.ProgramResult(exit_code=0, stdout=traj.answer or "", stderr="")

    class WorkbenchEnvConfig(vf.SingleAgentEnvConfig):
        """verifiers' single-agent config with the harness on this machine by default (a subprocess runtime, not
        a Prime sandbox: the loop runs in-process and needs no box)."""

        agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())

    class WorkbenchEnv(vf.Env[WorkbenchEnvConfig]):
        """The single-agent env (one ``agent`` seat playing each task) with :class:`WorkbenchEnvConfig`."""

        async def run(self, task: Any, agents: Any) -> None:
            await agents.agent.run(task)

    def load_environment(**kwargs: Any) -> Any:
        """The environment (:class:`WorkbenchEnv` over this taskset and harness); ``kwargs`` go into its config
        (verifiers' ``EnvConfig`` fields, e.g. ``agent={"runtime": {"type": "docker"}}``)."""
        from verifiers.v1.utils.loaders import load_environment as load

        taskset = {"id": package, **kwargs.pop("taskset", {})}
        return load(WorkbenchEnvConfig.model_validate({**kwargs, "taskset": taskset}))

    return {"taskset": WorkbenchTaskset, "harness": WorkbenchHarness, "env": WorkbenchEnv, "task": task_cls, "spec": spec,
            "load_environment": load_environment, "n_prompt": n_prompt}
