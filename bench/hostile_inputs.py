"""Hostile inputs against the real command line: each case (a file or a flag value the workbench must refuse) runs
``python -m workbench ...`` in a fresh process and is counted as a clean one-line error (exit 2, one ``error:`` line
naming the input, no traceback), a traceback, accepted silently (exit 0, or an error that left a bogus run folder),
or other (a timeout, an error of several lines). Prints one markdown table per case and one of the counts, with each
process's peak memory (its own VmHWM, written as it exits).

    .venv/bin/python bench/hostile_inputs.py [--only SUBSTRING] [--timeout 120]

A case that is accepted goes on to its work (an evaluation of one question with the default model, a server): the
timeout bounds it. The full-disk cases patch the run writer in the child (a simulated ENOSPC; no mount needed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEEP = "[" * 100_000 + "]" * 100_000

#: Runs the command line as ``python -m workbench`` does, after an optional prelude (a patch), and writes the process's
#: peak resident memory when it exits (after any traceback is printed).
CHILD = r"""
import atexit, os, runpy, sys
def _hwm():
    with open("/proc/self/status") as f, open(os.environ["HOSTILE_HWM"], "w") as out:
        out.write(next((l.split()[1] for l in f if l.startswith("VmHWM:")), "0"))
atexit.register(_hwm)
exec(os.environ.get("HOSTILE_PRELUDE", ""))
sys.argv = ["workbench", *sys.argv[1:]]
runpy.run_module("workbench", run_name="__main__", alter_sys=True)
"""

#: A full disk (ENOSPC) where a run writes its trajectories, an eval's last step.
DISK_FULL = """
import errno, os, workbench.storage.runs as _r
def _full(trajs, path, **kw):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
_r.save_trajectories = _full
"""


@dataclass
class Case:
    item: str
    label: str
    argv: Callable[[Path], list[str]]
    names: str = ""
    """A piece of text the error line must hold (the input's name); empty: any one-line error."""
    note: str = ""
    """For an input that is read with a note instead of refused: the text the output must hold."""
    prelude: str = ""
    leaves_no_run: bool = False
    """The command must leave no run folder behind (a failed start)."""
    files: dict[str, str | None] = field(default_factory=dict)
    """Files (text) or folders (None) made under the case's folder first."""


def _jl(*recs: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in recs)


GOOD = {"id": "q1", "question": "Who founded Firm0?", "golden_answers": ["Ada"]}
SAMPLE = {"input": "Question: who?\n", "output": "<answer>x</answer>", "gts": ["x"], "score": 1.0, "step": 1}
MUSIQUE = {"id": "2hop__1_2", "question": "q?", "answer": "a",
           "question_decomposition": [{"question": "x", "answer": "a", "paragraph_support_idx": 0}]}


def _eval(name: str, *more: str) -> Callable[[Path], list[str]]:
    return lambda d: ["eval", "--method", "direct", "--dataset", str(d / name), "--limit", "1", "--no-progress", *more]


def _import(*more: str, folder: str = "dumps") -> Callable[[Path], list[str]]:
    return lambda d: ["import", "verl", str(d / folder), "--method", "search_r1", "--no-features", *more]


def _train(*more: str) -> Callable[[Path], list[str]]:
    return lambda d: ["train", *[m.replace("{d}", str(d)) for m in more]]


def _config(name: str) -> Callable[[Path], list[str]]:
    return lambda d: ["train", "--config", str(d / name), "--no-progress"]


def _regress(name: str) -> Callable[[Path], list[str]]:
    return lambda d: ["regress", "--config", str(d / name), "--out", str(d / "regress")]


def cases() -> list[Case]:
    hotpot = {"_id": "h1", "question": "q?", "answer": "a", "context": [["T", ["s."]]]}
    return [
        # ---- deep nesting (RecursionError)
        Case("deep", "dataset JSONL nested 100k deep", _eval("q.jsonl"), "q.jsonl",
             files={"q.jsonl": '{"id": "a", "question": "q?", "golden_answers": ' + DEEP + "}\n"}),
        Case("deep", "dataset JSON nested 100k deep", _eval("q.json"), "q.json", files={"q.json": DEEP}),
        Case("deep", "corpus line nested 100k deep",
             lambda d: ["eval", "--method", "search_r1", "--dataset", str(d / "q.jsonl"), "--corpus",
                        str(d / "c.jsonl"), "--no-progress"], "c.jsonl",
             files={"q.jsonl": _jl(GOOD), "c.jsonl": '{"id": "1", "contents": ' + DEEP + "}\n"}),
        Case("deep", "train --config YAML nested 50k deep", _config("c.yaml"), "c.yaml",
             files={"c.yaml": "steps: " + "[" * 50_000 + "]" * 50_000 + "\n"}),
        Case("deep", "train --config JSON nested 100k deep", _config("c.json"), "c.json",
             files={"c.json": '{"steps": ' + DEEP + "}"}),
        Case("deep", "verl export.json nested 100k deep", _import(), "export.json",
             files={"dumps/1.jsonl": _jl(SAMPLE), "dumps/export.json": DEEP}),
        Case("deep", "verl dump line nested 100k deep", _import(), "no readable samples",
             files={"dumps/1.jsonl": '{"output": "x", "gts": ' + DEEP + "}\n"}),
        Case("deep", "adapter provenance.json nested 100k deep",
             lambda d: ["eval", "--method", "search_r1+lora", "--adapter", str(d / "ad"), "--limit", "1"],
             "provenance.json", files={"ad/provenance.json": '{"config": ' + DEEP + "}",
                                       "ad/adapter_config.json": '{"peft_type": "LORA", "r": 8}',
                                       "ad/adapter_model.safetensors": ""}),
        Case("deep", "adapter_config.json nested 100k deep",
             lambda d: ["eval", "--method", "search_r1+lora", "--adapter", str(d / "ad"), "--limit", "1"],
             "adapter_config.json", files={"ad/adapter_config.json": DEEP, "ad/adapter_model.safetensors": ""}),
        Case("deep", "regress suite nested 50k deep", _regress("s.yaml"), "s.yaml",
             files={"s.yaml": "cases: " + "[" * 50_000 + "]" * 50_000 + "\n"}),
        # ---- verl import
        Case("verl", "dump line: gts 7, input a list, score \"abc\"", _import(), "no readable samples",
             files={"dumps/1.jsonl": _jl({**SAMPLE, "gts": 7}, {**SAMPLE, "input": [1]}, {**SAMPLE, "score": "abc"})}),
        Case("verl", "dump line: gts an object", _import(), "no readable samples",
             files={"dumps/1.jsonl": _jl({**SAMPLE, "gts": {"a": {"b": 1}}})}),
        Case("verl", "metrics row with step 1e400", _import(), note="1 row(s) skipped",
             files={"dumps/1.jsonl": _jl(SAMPLE), "dumps/metrics.jsonl": '{"step": 1e400, "data": {"a": 1}}\n'}),
        Case("verl", "a 26-digit dump name", _import(), "12345678901234567890123456",
             files={"dumps/12345678901234567890123456.jsonl": _jl(SAMPLE)}),
        Case("verl", "a dump that is a folder", _import(), "1.jsonl", files={"dumps/1.jsonl": None}),
        Case("verl", "metrics.jsonl that is a folder", _import(), "metrics.jsonl",
             files={"dumps/1.jsonl": _jl(SAMPLE), "dumps/metrics.jsonl": None}),
        Case("verl", "export.json that is a folder", _import(), "export.json",
             files={"dumps/1.jsonl": _jl(SAMPLE), "dumps/export.json": None}),
        Case("verl", "export.json that is a list", _import(), "export.json",
             files={"dumps/1.jsonl": _jl(SAMPLE), "dumps/export.json": "[1]"}),
        Case("verl", "import --name of 300 characters", _import("--name", "n" * 300), "--name",
             files={"dumps/1.jsonl": _jl(SAMPLE)}),
        # ---- eval
        Case("eval", "eval --name of 300 characters", _eval("q.jsonl", "--name", "n" * 300), "--name",
             files={"q.jsonl": _jl(GOOD)}),
        Case("eval", "a full disk as the run is written (simulated ENOSPC)", _eval("q.jsonl"), "not saved",
             prelude=DISK_FULL, files={"q.jsonl": _jl(GOOD)}),
        Case("eval", "--protocol-kwargs '[1]'", lambda d: ["eval", "--method", "direct", "--protocol-kwargs", "[1]"],
             "--protocol-kwargs"),
        # ---- dataset fields (silent coercions)
        Case("fields", "HotpotQA supporting_facts: 7", _eval("h.json"), "supporting_facts",
             files={"h.json": json.dumps([{**hotpot, "supporting_facts": 7}])}),
        Case("fields", "HotpotQA sentence index \"x\"", _eval("h.json"), "supporting fact",
             files={"h.json": json.dumps([{**hotpot, "supporting_facts": [["T", "x"]]}])}),
        Case("fields", "golden_answers: 5", _eval("q.jsonl"), "golden_answers",
             files={"q.jsonl": _jl({**GOOD, "golden_answers": 5})}),
        Case("fields", "golden_answers: an object", _eval("q.jsonl"), "golden_answers",
             files={"q.jsonl": _jl({**GOOD, "golden_answers": {"x": 1}})}),
        Case("fields", "golden_answers: a nested list", _eval("q.jsonl"), "golden_answers",
             files={"q.jsonl": _jl({**GOOD, "golden_answers": [["Ada"]]})}),
        Case("fields", "id: NaN", _eval("q.jsonl"), "NaN", files={"q.jsonl": _jl({**GOOD, "id": float("nan")})}),
        Case("fields", "an empty question", _eval("q.jsonl"), "empty question",
             files={"q.jsonl": _jl({**GOOD, "question": "  "})}),
        Case("fields", "MuSiQue paragraph: null", _eval("m.jsonl"), "paragraphs[0]",
             files={"m.jsonl": _jl({**MUSIQUE, "paragraphs": [None]})}),
        Case("fields", "MuSiQue paragraph_text: null", _eval("m.jsonl"), "paragraph_text",
             files={"m.jsonl": _jl({**MUSIQUE, "paragraphs": [{"idx": 0, "title": "T", "paragraph_text": None}]})}),
        # ---- train flags and config files of the wrong kind
        Case("config", "--loss-overrides '{\"kl_coef\": \"abc\"}'", _train("--loss-overrides", '{"kl_coef": "abc"}'),
             "kl_coef"),
        Case("config", "--loss-overrides '[1]'", _train("--loss-overrides", "[1]"), "loss_overrides"),
        Case("config", "--reward-weights '[1]'", _train("--reward-weights", "[1]"), "reward_weights"),
        Case("config", "--protocol-kwargs '{\"top_k\": \"x\"}'", _train("--protocol-kwargs", '{"top_k": "x"}'),
             "top_k"),
        Case("config", "--question-types '\"x\"'", _train("--question-types", '"x"'), "question_types"),
        Case("config", "config steps: [1, 2]", _config("c.yaml"), "steps", files={"c.yaml": "steps: [1, 2]\n"}),
        Case("config", "config reward_weights: [1]", _config("c.yaml"), "reward_weights",
             files={"c.yaml": "reward_weights: [1]\n"}),
        Case("config", "config section rollout: [1, 2]", _config("c.yaml"), "rollout",
             files={"c.yaml": "rollout: [1, 2]\n"}),
        Case("config", "config steps: 1e400 (JSON)", _config("c.json"), "steps", files={"c.json": '{"steps": 1e400}'}),
        Case("config", "config a YAML list", _config("c.yaml"), "mapping", files={"c.yaml": "- steps\n- 3\n"}),
        Case("config", "config a folder", _config("c"), "directory", files={"c": None}),
        # ---- sft, export, serve-retrieval, regress
        Case("sft", "sft --traces of a folder that is no run",
             lambda d: ["sft", "--traces", json.dumps([str(d / "nope")]), "--no-progress"], "nope",
             leaves_no_run=True, files={"nope": None}),
        Case("export", "export a second method into one --out",
             lambda d: ["export", "verl", "--method", "dynasearcher", "--limit", "2", "--out", str(d / "exp")],
             "exp", files={"exp/export.json": json.dumps({"method": "search_r1"}), "exp/train.parquet": ""}),
        Case("serve", "serve-retrieval --index-dir FILE",
             lambda d: ["serve-retrieval", "--index-dir", str(d / "f"), "--port", "0"], "--index-dir",
             files={"f": "x\n"}),
        Case("regress", "regress: a YAML syntax error", _regress("s.yaml"), "s.yaml", files={"s.yaml": "cases: [\n"}),
        Case("regress", "regress: an unsafe tag", _regress("s.yaml"), "s.yaml",
             files={"s.yaml": 'cases: !!python/object/apply:os.system ["echo hi"]\n'}),
        Case("regress", "regress: {out_dir:>99999999999}", _regress("s.yaml"), "out_dir",
             files={"s.yaml": 'cases:\n  - name: a\n    notebook: nb\n    parameters: {x: "{out_dir:>99999999999}"}\n'}),
        Case("regress", "regress: timeout: abc", _regress("s.yaml"), "timeout",
             files={"s.yaml": "setup:\n  - name: f\n    demo: {limit: 1}\n    timeout: abc\n"}),
    ]


def _make(d: Path, files: dict[str, str | None]) -> None:
    for name, text in files.items():
        p = d / name
        if text is None:
            p.mkdir(parents=True, exist_ok=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")


def _runs(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if (p / "config.json").exists()] if root.is_dir() else []


def run_case(case: Case, d: Path, timeout: float) -> dict:
    """Run one case in a fresh process; its outcome, peak memory, wall time and error line."""
    d.mkdir(parents=True, exist_ok=True)
    _make(d, case.files)
    runs, hwm = d / "runs", d / "hwm"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WORKBENCH_RUNS": str(runs), "HOSTILE_HWM": str(hwm),
           "HOSTILE_PRELUDE": case.prelude}
    env.pop("WORKBENCH_RETRIEVAL_API_KEY", None)
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, *case.argv(d)], capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=timeout, start_new_session=True)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = None, str(e.stdout or ""), str(e.stderr or "")
    wall = time.perf_counter() - t0
    mib = int(hwm.read_text() or 0) / 1024 if hwm.exists() else float("nan")
    errors = [line for line in err.splitlines() if "error:" in line]
    line = errors[-1] if errors else ""
    if "Traceback (most recent call last)" in err:
        outcome, line = "traceback", (err.strip().splitlines() or [""])[-1]
    elif rc is None:
        outcome = "other (ran on past the timeout)"
    elif rc == 0:
        outcome = "clean (read, with a note)" if case.note and case.note in out else "accepted silently"
        line = line or (out.strip().splitlines() or [""])[-1]
    elif len(errors) == 1 and case.names in line:
        outcome = "accepted silently" if case.leaves_no_run and _runs(runs) else "clean one-line error"
        if outcome != "clean one-line error":
            line += " [left a run folder]"
    else:
        outcome = "other (no one-line error naming the input)"
    return {"outcome": outcome, "mib": mib, "wall": wall, "line": line}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="run only the cases whose label holds this text")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a case may run (default: %(default)s)")
    args = ap.parse_args()
    selected = [c for c in cases() if args.only.lower() in c.label.lower()]
    results = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        for i, case in enumerate(selected):
            r = run_case(case, Path(tmp) / f"case{i:02d}", args.timeout)
            results.append((case, r))
            print(f"[{i + 1}/{len(selected)}] {r['outcome']}: {case.label} ({r['wall']:.1f}s)", file=sys.stderr)
    total = time.perf_counter() - t0

    def cell(text: str, n: int = 110) -> str:
        text = text.replace("|", "\\|").replace("\n", " ")
        return text if len(text) <= n else text[: n - 3] + "..."

    print(f"Hostile inputs: {len(results)} cases, {total:.0f}s, {platform.machine()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}\n")
    print("| item | input | outcome | peak RSS (MiB) | wall (s) | what it said |")
    print("|---|---|---|---:|---:|---|")
    for case, r in results:
        print(f"| {case.item} | {cell(case.label, 60)} | {r['outcome']} | {r['mib']:.0f} | {r['wall']:.1f} | "
              f"{cell(r['line'])} |")
    counts = Counter(r["outcome"] for _, r in results)
    print("\n| outcome | cases | peak RSS, largest (MiB) |")
    print("|---|---:|---:|")
    for outcome, n in counts.most_common():
        peak = max(r["mib"] for _, r in results if r["outcome"] == outcome)
        print(f"| {outcome} | {n} | {peak:.0f} |")
    return 0 if counts.get("clean one-line error", 0) + counts.get("clean (read, with a note)", 0) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
