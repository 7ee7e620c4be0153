"""A backend over any OpenAI-compatible ``/v1/completions`` server (vLLM, SGLang, ``workbench.rollout.server``).

Token-in, token-out over HTTP: each prompt is sent as its list of token ids (vLLM and SGLang
accept token-id prompts), one request per prompt, ``concurrency`` requests at a time (the
server batches them) over one ``httpx`` client (kept-alive connections, ``concurrency`` of them). Every request
has a timeout and is retried (``tenacity``) with exponential backoff, or the server's ``Retry-After`` (seconds or
an HTTP date) when longer, on connection errors, timeouts, HTTP 429 / 5xx and malformed replies; a prompt that
still fails after the last retry comes back as a ``Generation`` with ``finish_reason="error"`` and ``error`` set,
and the rest of the batch goes on.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import json
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import tenacity

from workbench.rollout.backends.base import (
    EOS,
    ERROR,
    LENGTH,
    STOP,
    Backend,
    Generation,
    SamplingParams,
    find_stop,
    token_limits,
)
from workbench.util.http_stack import is_loopback
from workbench.util.textsafe import clean_text

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

TOKEN_ID_PREFIX = "token_id:"  # vLLM's `return_tokens_as_token_ids` form


class RequestFailed(Exception):
    """One attempt failed. ``retry`` says whether another attempt may help."""

    def __init__(self, message: str, retry: bool, retry_after: float | None = None):
        super().__init__(message)
        self.retry = retry
        self.retry_after = retry_after


class OpenAIBackend(Backend):
    """Generate through an OpenAI-compatible completions endpoint.

    Exact token ids need the server's token-id mode. The request asks for it twice, in the
    vLLM spelling: ``return_token_ids=true`` (vLLM returns ``choices[].token_ids``) and
    ``return_tokens_as_token_ids=true`` with ``logprobs=1`` (each entry of
    ``choices[].logprobs.tokens`` reads ``"token_id:123"``). A server that honours neither
    returns token *strings*; they are mapped back through the tokenizer, which is not exact
    for every tokenizer, so such generations carry ``meta["exact_ids"] = False`` (and a
    warning is logged once). Servers that return no logprobs at all give NaN logprobs and
    ``meta["logprobs"] = False``: fine for evaluation, not for training.

    Sampling seeds are per request: prompt ``i`` of a call gets ``params.row_seeds[i]`` (the rollout engine's seed of
    that trajectory's turn), else ``seed + i``, so the members of a group (identical prompts) do not all draw the
    same sample.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000/v1`` (``/v1`` is appended when missing).
        model: the served model name (the ``model`` field of each request).
        tokenizer: the policy's tokenizer (the engine encodes observations with it); a name or
            path loads it with ``workbench.core.models.load_tokenizer``.
        api_key: sent as ``Authorization: Bearer <api_key>`` when given.
        timeout_s: per-request timeout (connect + read).
        max_retries: retries after the first attempt (so ``max_retries + 1`` attempts at most).
        backoff_s: the wait before retry ``k`` is ``backoff_s * 2**k`` (or the server's
            ``Retry-After``, whichever is longer, capped at 60 s).
        concurrency: requests in flight at once.
        extra_body: more fields merged into every request (e.g. ``{"top_k": 20}``).
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: PreTrainedTokenizerBase | str | None,
        api_key: str | None = None,
        timeout_s: float = 60,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        concurrency: int = 8,
        extra_body: dict[str, Any] | None = None,
    ):
        if timeout_s <= 0:
            raise ValueError(f"OpenAIBackend.timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise ValueError(f"OpenAIBackend.max_retries must be >= 0, got {max_retries}")
        if backoff_s < 0:
            raise ValueError(f"OpenAIBackend.backoff_s must be >= 0, got {backoff_s}")
        if concurrency < 1:
            raise ValueError(f"OpenAIBackend.concurrency must be >= 1, got {concurrency}")
        if tokenizer is None or isinstance(tokenizer, str):
            from workbench.core.models import load_tokenizer

            tokenizer = load_tokenizer(tokenizer or model)
        url = base_url.rstrip("/")
        self.base_url = url if url.endswith("/v1") else url + "/v1"
        self.model = model
        self.tokenizer = tokenizer
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.concurrency = concurrency
        self.extra_body = dict(extra_body or {})
        self._warned_inexact = False
        host = httpx.URL(self.base_url).host
        # a local server is reached directly, never through an http_proxy from the environment
        self._client = httpx.Client(
            timeout=timeout_s, trust_env=not is_loopback(host),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            headers={"Accept": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})})

    def close(self) -> None:
        """Close the kept-alive connections (they are also closed when the backend is garbage-collected)."""
        self._client.close()

    # ------------------------------------------------------------------ public
    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 max_new_tokens: list[int] | None = None) -> list[Generation]:
        if not prompts:
            return []
        limits = token_limits(prompts, params, max_new_tokens)
        jobs = [(list(p), lim, params.prompt_seed(i))
                for i, (p, lim) in enumerate(zip(prompts, limits))]
        if len(jobs) == 1 or self.concurrency == 1:
            return [self._one(p, params, lim, seed) for p, lim, seed in jobs]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(jobs)), thread_name_prefix="openai-backend") as ex:
            return list(ex.map(lambda job: self._one(job[0], params, job[1], job[2]), jobs))

    def models(self) -> list[str]:
        """Model names the server lists at ``GET /v1/models``."""
        data = self._request("GET", "/models", None)
        return [m["id"] for m in data.get("data", [])]

    # ------------------------------------------------------------------ LoRA adapters (vLLM's runtime API)
    def load_lora_adapter(self, name: str, path: str) -> None:
        """Ask the server to load the PEFT adapter directory ``path`` as model ``name``
        (``POST /v1/load_lora_adapter``; vLLM needs ``--enable-lora`` and
        ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``, ``workbench.rollout.server`` ``--enable-lora``).
        Requests then sample from it with ``model=name`` (set ``self.model``). RuntimeError if refused."""
        self._lora_call("/load_lora_adapter", {"lora_name": name, "lora_path": path}, f"load LoRA adapter {name!r} from {path}")

    def unload_lora_adapter(self, name: str) -> None:
        """``POST /v1/unload_lora_adapter`` (``{"lora_name": name}``); RuntimeError if refused."""
        self._lora_call("/unload_lora_adapter", {"lora_name": name}, f"unload LoRA adapter {name!r}")

    def _lora_call(self, path: str, body: dict[str, Any], what: str) -> None:
        try:
            self._request("POST", path, body, expect_json=False)  # vLLM answers in plain text
        except RequestFailed as e:
            raise RuntimeError(f"the rollout server {self.base_url} could not {what}: {e}. Start vLLM with "
                               "--enable-lora (and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True) or "
                               "`python -m workbench.rollout.server --enable-lora`") from None

    # ------------------------------------------------------------------ one prompt
    def request_body(self, prompt: list[int], params: SamplingParams, limit: int, seed: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": int(limit),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 1,
            "return_token_ids": True,  # vLLM: choices[].token_ids
            "return_tokens_as_token_ids": True,  # vLLM: logprobs.tokens as "token_id:N"
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if seed is not None:
            body["seed"] = int(seed)
        body.update(self.extra_body)
        return body

    def _one(self, prompt: list[int], params: SamplingParams, limit: int, seed: int | None) -> Generation:
        if limit <= 0:
            return Generation([], [], LENGTH)
        body = self.request_body(prompt, params, limit, seed)
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1), wait=self._backoff, reraise=True,
            retry=tenacity.retry_if_exception(lambda e: isinstance(e, RequestFailed) and e.retry),
            before_sleep=lambda rs: log.debug("completion request failed (%s); retry %d in %.2fs", rs.outcome.exception(),
                                              rs.attempt_number, rs.upcoming_sleep))
        attempts = 0
        try:
            for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    gen = self.parse_choice(self._request("POST", "/completions", body), params)
            gen.meta["attempts"] = attempts
            return gen
        except RequestFailed as e:
            last = str(e)
        except Exception as e:  # a reply shaped in a way nobody foresaw: recorded for this prompt only
            last = f"unexpected reply: {type(e).__name__}: {e}"
        return Generation([], [], ERROR, error=f"{last} (after {attempts} attempt{'s' * (attempts > 1)})",
                          meta={"attempts": attempts})

    def _backoff(self, state: tenacity.RetryCallState) -> float:
        """The wait before the next attempt: ``backoff_s * 2**k`` after the k-th retry, or the server's
        ``Retry-After`` when longer; at most 60 s."""
        after = getattr(state.outcome.exception(), "retry_after", None) if state.outcome else None
        return min(max(self.backoff_s * 2 ** (state.attempt_number - 1), after or 0.0), 60.0)

    def _request(self, method: str, path: str, body: dict[str, Any] | None, expect_json: bool = True) -> dict[str, Any]:
        """One HTTP attempt; raises ``RequestFailed`` (retryable or not) on any failure. ``expect_json=False``:
        any 2xx body is accepted (returned as ``{"text": ...}``)."""
        try:
            resp = self._client.request(method, self.base_url + path, json=body)
        except httpx.TimeoutException as e:
            raise RequestFailed(f"timeout on {path}: {type(e).__name__}: {e}", True) from e
        except httpx.TransportError as e:  # refused, reset or closed connections, DNS, proxy errors
            raise RequestFailed(f"connection error on {path}: {type(e).__name__}: {e}", True) from e
        if resp.is_error:
            retry = resp.status_code == 429 or resp.status_code >= 500
            raise RequestFailed(f"HTTP {resp.status_code} from {path}: {_error_detail(resp)}", retry,
                                retry_after(resp.headers.get("Retry-After")))
        if not expect_json:
            return {"text": resp.text}
        try:
            out = json.loads(resp.content)
        except (ValueError, UnicodeDecodeError) as e:
            raise RequestFailed(f"malformed JSON from {path}: {resp.content[:120]!r}", True) from e
        if not isinstance(out, dict):
            raise RequestFailed(f"malformed reply from {path}: expected a JSON object, got {type(out).__name__}", True)
        return out

    # ------------------------------------------------------------------ parsing
    def parse_choice(self, data: dict[str, Any], params: SamplingParams) -> Generation:
        """Turn a completions reply (one choice) into a ``Generation``; ``RequestFailed`` if malformed."""
        try:
            choice = data["choices"][0]
        except (KeyError, IndexError, TypeError) as e:
            raise RequestFailed(f"malformed reply: no choices[0] in {str(data)[:120]}", True) from e
        lp = choice.get("logprobs") or {}
        tokens = lp.get("tokens")
        token_lps = lp.get("token_logprobs")
        meta: dict[str, Any] = {}
        try:
            if choice.get("token_ids") is not None:
                ids = [int(t) for t in choice["token_ids"]]
            elif tokens is not None and all(isinstance(t, str) and t.startswith(TOKEN_ID_PREFIX) for t in tokens):
                ids = [int(t[len(TOKEN_ID_PREFIX):]) for t in tokens]
            elif tokens is not None:
                ids = self._ids_from_token_strings(tokens, meta)
            else:
                ids = self.tokenizer.encode(clean_text(choice.get("text") or ""), add_special_tokens=False)
                meta["exact_ids"] = False
        except (TypeError, ValueError) as e:
            raise RequestFailed(f"malformed token ids in reply: {e}", True) from e
        if token_lps is None:
            logprobs = [math.nan] * len(ids)
            meta["logprobs"] = False
        else:
            if len(token_lps) != len(ids):
                raise RequestFailed(f"malformed reply: {len(ids)} token ids but {len(token_lps)} logprobs", True)
            logprobs = [math.nan if x is None else float(x) for x in token_lps]
        if meta.get("exact_ids") is False and not self._warned_inexact:
            self._warned_inexact = True
            log.warning("server %s returned token strings, not ids: mapped back through the tokenizer (not exact). "
                        "Start vLLM with --return-tokens-as-token-ids or a version that supports return_token_ids.",
                        self.base_url)
        reason, stop_string = self._finish(choice, ids, params)
        if reason == ERROR:
            return Generation(ids, logprobs, ERROR, error=f"server finish_reason {choice.get('finish_reason')!r}",
                              meta=meta)
        return Generation(ids, logprobs, reason, stop_string=stop_string, meta=meta)

    def _finish(self, choice: dict[str, Any], ids: list[int], params: SamplingParams) -> tuple[str, str | None]:
        """``stop`` with a string ``stop_reason`` -> stop; last id an EOS id -> eos; ``length`` -> length."""
        fr, sr = choice.get("finish_reason"), choice.get("stop_reason")
        if fr == "stop" and isinstance(sr, str):
            return STOP, sr
        if ids and ids[-1] in self.eos_token_ids():
            return EOS, None
        if fr == "length":
            return LENGTH, None
        if fr == "stop":
            if isinstance(sr, int):  # a stop token id
                return EOS, None
            tail = self.tokenizer.decode(ids[-16:]) if ids else ""
            s = find_stop(tail, params.stop)
            return (STOP, s) if s else (EOS, None)  # a server that ended at EOS without returning it
        return ERROR, None

    def _ids_from_token_strings(self, tokens: list[str], meta: dict[str, Any]) -> list[int]:
        meta["exact_ids"] = False
        ids: list[int] = []
        for t in tokens:
            enc = self.tokenizer.encode(t, add_special_tokens=False)
            if len(enc) == 1:
                ids.append(enc[0])
                continue
            tid = self.tokenizer.convert_tokens_to_ids(t)
            if tid is None or tid == getattr(self.tokenizer, "unk_token_id", None):
                raise ValueError(f"cannot map token string {t!r} to one id; use the server's token-id mode")
            ids.append(int(tid))
        return ids


def _error_detail(resp: httpx.Response) -> str:
    raw = resp.content[:300]
    try:
        msg = json.loads(raw).get("error", {})
        return str(msg.get("message", msg) if isinstance(msg, dict) else msg)
    except (ValueError, AttributeError):
        return clean_text(raw) or resp.reason_phrase


def retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: a number of seconds or an HTTP date; None if absent or unreadable.

    >>> retry_after("2.5"), retry_after(None), retry_after("soon")
    (2.5, None, None)
    >>> retry_after("Wed, 21 Oct 2015 07:28:00 GMT")  # a date in the past: no wait
    0.0
    """
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return max(0.0, (when - _dt.datetime.now(_dt.timezone.utc)).total_seconds())

