"""Hostile inputs, round 3: each is one error line naming the input and the fix (exit 2), never a traceback and never
a silent substitution. Deep nesting in every file the workbench parses; verl dumps of the wrong shape; a run name no
folder can take; a full disk in eval and train; dataset fields of the wrong kind (``supporting_facts: 7``,
``golden_answers: 5``, a NaN id, a null paragraph, an empty question); config values of the wrong kind; an
``--index-dir`` that is a file; regression suites that do not read; two exports in one folder; a failed SFT start.

The commands run in this process (``main(argv)``); the step each would take after its checks (loading the model,
training, serving) is replaced by one that fails the test, so an input that is accepted shows as a failure here."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.test_cli_values import _refused
from workbench.apps.cli import main

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(autouse=True)
def no_model(monkeypatch, tmp_path):
    """The model never loads and no training starts: every case here must be refused before that."""
    import workbench.eval.runner
    import workbench.methods

    def never(*args, **kwargs):
        raise AssertionError("the command went on to its work: the input was accepted")

    monkeypatch.setattr(workbench.eval.runner, "load_backend", never)
    monkeypatch.setattr(workbench.methods, "trainer", never)
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _jsonl(path: Path, *records: dict) -> Path:
    return _write(path, "".join(json.dumps(r) + "\n" for r in records))


GOOD = {"id": "q1", "question": "Who founded Firm0?", "golden_answers": ["Ada"]}
SAMPLE = {"input": "Question: who?\n", "output": "<answer>x</answer>", "gts": ["x"], "score": 1.0, "step": 1}


def _eval(path: Path, *more: str) -> list[str]:
    return ["eval", "--method", "direct", "--dataset", str(path), "--limit", "1", "--no-progress", *more]


# --------------------------------------------------------------------------- item 10: tracebacks -> one line


@pytest.mark.parametrize("where", ["dataset.jsonl", "dataset.json", "corpus", "config.yaml", "config.json",
                                   "export.json", "suite.yaml"])
def test_deep_nesting_is_one_line_naming_the_file(capsys, tmp_path, where):
    if where.startswith("dataset"):
        text = '{"id": "a", "question": "q?", "golden_answers": ' + DEEP + "}\n" if where.endswith("l") else DEEP
        bad = _write(tmp_path / where, text)
        argv = _eval(bad)
    elif where == "corpus":
        bad = _write(tmp_path / "corpus.jsonl", '{"id": "1", "contents": ' + DEEP + "}\n")
        argv = ["eval", "--method", "search_r1", "--dataset", str(_jsonl(tmp_path / "q.jsonl", GOOD)), "--corpus",
                str(bad), "--no-progress"]
    elif where.startswith("config"):
        bad = _write(tmp_path / where, ("steps: " + "[" * 50_000 + "]" * 50_000) if where.endswith("yaml")
                     else '{"steps": ' + DEEP + "}")
        argv = ["train", "--config", str(bad)]
    elif where == "export.json":
        d = tmp_path / "export"
        _jsonl(d / "rollouts" / "1.jsonl", SAMPLE)
        bad = _write(d / "export.json", DEEP)
        argv = ["import", "verl", str(d), "--method", "search_r1", "--no-features", "--out", str(tmp_path / "runs")]
    else:
        bad = _write(tmp_path / where, "cases: " + DEEP + "\n")
        argv = ["regress", "--config", str(bad), "--out", str(tmp_path / "regress")]
    line = _refused(capsys, argv)
    assert str(bad) in line and "nested too deep" in line, line


@pytest.mark.parametrize("case", ["wrong types", "26-digit name", "metrics is a folder", "export.json is a folder",
                                  "export.json is a list", "step 1e400"])
def test_verl_dumps_of_the_wrong_shape(capsys, tmp_path, case):
    d = tmp_path / "dumps"
    _jsonl(d / "1.jsonl", SAMPLE)
    if case == "wrong types":
        _jsonl(d / "1.jsonl", {**SAMPLE, "gts": 7}, {**SAMPLE, "input": [1]}, {**SAMPLE, "score": "abc"})
        says = "no readable samples"
    elif case == "26-digit name":
        (d / "1.jsonl").rename(d / "12345678901234567890123456.jsonl")
        says = "12345678901234567890123456.jsonl"
    elif case == "metrics is a folder":
        (d / "metrics.jsonl").mkdir()
        says = "metrics.jsonl: a directory"
    elif case.startswith("export.json"):
        (d / "export.json").mkdir() if case.endswith("folder") else _write(d / "export.json", "[1]")
        says = "export.json"
    else:
        _write(d / "metrics.jsonl", '{"step": 1e400, "data": {"a": 1}}\n')
    argv = ["import", "verl", str(d), "--method", "search_r1", "--no-features", "--out", str(tmp_path / "runs")]
    if case == "step 1e400":  # a row the import skips, and says it did
        assert main(argv) == 0
        out = capsys.readouterr()
        assert "Traceback" not in out.err and "1 row(s) skipped" in out.out and "line 1" in out.out, out
        return
    line = _refused(capsys, argv)
    assert says in line, line


@pytest.mark.parametrize("command", ["eval", "import"])
def test_a_name_no_run_folder_can_take_is_refused_before_the_work(capsys, tmp_path, command):
    name = "n" * 300
    d = tmp_path / "dumps"
    _jsonl(d / "1.jsonl", SAMPLE)
    argv = (["eval", "--method", "direct", "--limit", "1"] if command == "eval"
            else ["import", "verl", str(d), "--method", "search_r1"])
    line = _refused(capsys, [*argv, "--name", name, "--out", str(tmp_path / "runs")])
    assert "--name" in line and "300 characters" in line and "shorter" in line, line
    assert not (tmp_path / "runs").exists()


def _disk_full(path: object = "/runs/x/trajectories.parquet") -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def test_a_full_disk_in_eval_is_one_line_and_the_scores_are_shown(capsys, tmp_path, monkeypatch, tokenizer):
    """The trajectories' write fails (ENOSPC) after the whole evaluation: the table of scores is printed, then one
    error line naming the run folder and saying the results were not saved; no double traceback."""
    import workbench.eval.runner
    import workbench.storage.runs
    from workbench.rollout.backends.scripted import ScriptedBackend

    backend = ScriptedBackend(tokenizer, ["<answer> Ada </answer>"])
    monkeypatch.setattr(workbench.eval.runner, "load_backend", lambda cfg: (backend, "scripted", "a scripted model"))

    def full(trajs, path, **kw):
        raise _disk_full(path)

    monkeypatch.setattr(workbench.storage.runs, "save_trajectories", full)
    runs = tmp_path / "runs"
    assert main(_eval(_jsonl(tmp_path / "q.jsonl", GOOD), "--out", str(runs))) == 2
    out = capsys.readouterr()
    errors = [x for x in out.err.splitlines() if "error:" in x]
    (run,) = runs.iterdir()
    assert "Traceback" not in out.err and len(errors) == 1, out.err
    assert "No space left on device" in errors[0] and str(run) in errors[0] and "not saved" in errors[0], errors[0]
    assert "per method (NOT SAVED)" in out.out and "direct" in out.out, out.out


def test_a_full_disk_in_train_is_one_line_naming_the_run(capsys, tmp_path, monkeypatch):
    import workbench.methods
    from workbench.storage.runs import Run

    run = Run.create(tmp_path / "runs", kind="train", name="t")

    def train():
        raise _disk_full(run.path / "steps" / "000003.trajectories.parquet")

    trainer = SimpleNamespace(rank=0, step=3, run=run, train=train, config=SimpleNamespace(
        preset="grpo", reward="dynasearcher", protocol="search_r1", model="m", steps=5))
    monkeypatch.setattr(workbench.methods, "trainer", lambda *a, **kw: trainer)
    line = _refused(capsys, ["train", "--steps", "5"])
    assert "No space left on device" in line and "step 3" in line and str(run.path) in line and "again" in line, line


@pytest.mark.parametrize("facts", [7, [["T", "x"]], {"title": 5, "sent_id": [0]}])
def test_hotpotqa_supporting_facts_of_the_wrong_shape(capsys, tmp_path, facts):
    rec = {"_id": "h1", "question": "q?", "answer": "a", "context": [["T", ["s."]]], "supporting_facts": facts}
    bad = _write(tmp_path / "hotpot_dev.json", json.dumps([rec]))
    line = _refused(capsys, _eval(bad))
    assert str(bad) in line and "record 1" in line and ("supporting_facts" in line or "supporting fact" in line), line


@pytest.mark.parametrize("flag, value, says", [
    ("--loss-overrides", '{"kl_coef": "abc"}', "kl_coef must be a number"),
    ("--loss-overrides", "[1]", "loss_overrides must be a mapping"),
    ("--reward-weights", "[1]", "reward_weights must be a mapping"),
    ("--protocol-kwargs", '{"top_k": "x"}', "top_k must be a whole number"),
    ("--question-types", '"x"', "question_types must be a list of strings"),
])
def test_train_flag_values_of_the_wrong_kind(capsys, flag, value, says):
    line = _refused(capsys, ["train", flag, value])
    assert says in line, line


@pytest.mark.parametrize("text, says", [
    ("steps: [1, 2]\n", "steps must be a whole number"),
    ("lr: [0.1]\n", "lr must be a number"),
    ("rollout: [1, 2]\n", "section 'rollout' must be a mapping"),
    ("method: [a]\n", "method must be a string"),
])
def test_config_values_of_the_wrong_kind(capsys, tmp_path, text, says):
    cfg = _write(tmp_path / "run.yaml", text)
    line = _refused(capsys, ["train", "--config", str(cfg)])
    assert str(cfg) in line and says in line, line


def test_serve_retrieval_index_dir_that_is_a_file(capsys, tmp_path, monkeypatch):
    import workbench.integrations.retrieval_server as rs

    monkeypatch.setattr(rs, "serve_forever", lambda *a, **kw: pytest.fail("the server started"))
    f = _write(tmp_path / "index", "x\n")
    line = _refused(capsys, ["serve-retrieval", "--index-dir", str(f), "--port", "0"])
    assert str(f) in line and "--index-dir" in line and "not a directory" in line, line


@pytest.mark.parametrize("text, says", [
    ("cases: [\n", "YAML error at line 2"),
    ('cases: !!python/object/apply:os.system ["echo hi"]\n', "python/object/apply"),
    ("setup:\n  - name: f\n    demo: {limit: 1}\n    timeout: abc\n", "timeout must be a whole number"),
    ('cases:\n  - name: a\n    notebook: nb\n    parameters: {x: "{out_dir!r}"}\n', "{out_dir!r}"),
])
def test_regress_suites_that_do_not_read(capsys, tmp_path, text, says):
    suite = _write(tmp_path / "suite.yaml", text)
    line = _refused(capsys, ["regress", "--config", str(suite), "--out", str(tmp_path / "out")])
    assert str(suite) in line and says in line, line


def test_a_format_spec_in_a_suite_is_refused_as_it_is_read(tmp_path):
    """``{out_dir:>99999999999}`` asked for a 100 GB string when the case ran (MemoryError): refused at load."""
    from workbench.regress.suite import load_suite

    suite = _write(tmp_path / "suite.yaml", 'cases:\n  - name: a\n    notebook: nb\n'
                                            '    parameters: {x: "{out_dir:>99999999999}"}\n')
    with pytest.raises(ValueError, match=r"unsupported placeholder \{out_dir:>99999999999\}"):
        load_suite(suite)


# --------------------------------------------------------------------------- item 12: silent coercions


@pytest.mark.parametrize("record, says", [
    ({**GOOD, "golden_answers": 5}, "golden_answers must be a string or a list of strings, got 5"),
    ({**GOOD, "golden_answers": {"x": 1}}, "golden_answers must be a string or a list of strings"),
    ({**GOOD, "golden_answers": [["Ada"]]}, "golden_answers must be a string or a list of strings"),
    ({**GOOD, "id": float("nan")}, "id must be a string or a number, got NaN"),
    ({**GOOD, "question": "  "}, "empty question"),
    ({"id": "2hop__1_2", "question": "q?", "answer": "a", "paragraphs": [None],
      "question_decomposition": [{"question": "x", "answer": "a", "paragraph_support_idx": 0}]}, "paragraphs[0]"),
    ({"id": "2hop__1_2", "question": "q?", "answer": "a",
      "paragraphs": [{"idx": 0, "title": "T", "paragraph_text": None}],
      "question_decomposition": [{"question": "x", "answer": "a", "paragraph_support_idx": 0}]},
     "paragraphs[0].paragraph_text must be a string, got null"),
])
def test_dataset_fields_of_the_wrong_kind_are_refused_not_coerced(capsys, tmp_path, record, says):
    bad = _jsonl(tmp_path / "questions.jsonl", record)
    line = _refused(capsys, _eval(bad))
    assert f"{bad}:1" in line and says in line, line


def test_exporting_a_second_method_into_one_out_is_refused(capsys, tmp_path):
    from workbench.integrations.verl.export import export_verl

    out = tmp_path / "exports" / "sr1"
    export_verl("search_r1", out=out, limit=2)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    line = _refused(capsys, ["export", "verl", "--method", "dynasearcher", "--limit", "2", "--out", str(out)])
    assert str(out) in line and "'search_r1'" in line and "folder of its own" in line, line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the first export is untouched
    assert main(["export", "verl", "--method", "search_r1", "--limit", "2", "--out", str(out)]) == 0  # again: fine


@pytest.mark.parametrize("case", ["traces", "dataset"])
def test_a_failed_sft_start_leaves_no_running_folder(capsys, tmp_path, monkeypatch, case):
    """A training run whose inputs fail makes no folder; an SFT run made one first and left it "running"."""
    import workbench.methods
    from workbench.rl.sft import SFTTrainer

    monkeypatch.setattr(workbench.methods, "trainer", lambda cfg, **kw: SFTTrainer(cfg, workbench.methods.run_parts(cfg), **kw))
    traces = tmp_path / "expert-run"
    _write(traces / "config.json", "{}")
    runs = tmp_path / "runs"
    argv = ["sft", "--eval-limit", "0", "--out", str(runs)]
    if case == "traces":
        argv += ["--traces", json.dumps([str(tmp_path / "not-a-run")])]
    else:  # fails inside the trainer's set-up, after the folder was made
        argv += ["--traces", json.dumps([str(traces)]), "--dataset", str(tmp_path / "missing.jsonl")]
    line = _refused(capsys, argv)
    assert ("not-a-run" if case == "traces" else "missing.jsonl") in line, line
    assert not runs.exists() or not any(runs.iterdir()), list(runs.iterdir())


def _peak_mib_of(code: str) -> tuple[int, str]:
    """Run ``code`` in a fresh interpreter; its peak resident memory (MiB) and its stderr's last line."""
    import subprocess
    import sys

    # VmHWM, the process's own peak (ru_maxrss can carry the parent's over a vfork-and-exec)
    prog = code + ("\nimport sys\nhwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:'))"
                   "\nprint(int(hwm.split()[1]) // 1024, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=300)
    lines = p.stderr.strip().splitlines()
    return int(lines[-1]), "\n".join(lines[:-1])


@pytest.mark.parametrize("what", ["dataset", "corpus"])
def test_a_2_gb_sparse_file_is_refused_without_being_read(tmp_path, what):
    """A 2 GB file of zeros (a sparse file: no disk used) as a dataset or a corpus took 6.6 GB of memory before "not
    valid JSON": its one "line" was read whole, twice. Now its first character refuses it."""
    f = tmp_path / "big.jsonl"
    with open(f, "wb") as out:
        out.truncate(2 << 30)
    call = (f"from workbench.data.loaders import load_dataset; load_dataset({str(f)!r}, format='qa')" if what == "dataset"
            else f"from workbench.data.corpora import load_corpus; load_corpus({str(f)!r})")
    peak, err = _peak_mib_of(f"try:\n    {call}\nexcept ValueError as e:\n    import sys; print(e, file=sys.stderr)")
    assert f"{f}: not valid JSON or JSON lines: it starts with '\\x00'" in err, err
    assert peak < 1024, peak


def test_a_line_longer_than_a_record_is_refused_as_it_is_reached(tmp_path, monkeypatch):
    from workbench.data import records
    from workbench.data.corpora import iter_flashrag_corpus
    from workbench.data.records import iter_records

    monkeypatch.setattr(records, "MAX_LINE_CHARS", 1000)
    f = tmp_path / "q.jsonl"
    f.write_text('{"question": "q", "answers": ["a"]}\n{"question": "' + "x" * 2000 + '"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"q.jsonl:2: a line longer than 1,000 characters"):
        list(iter_records(f))
    c = tmp_path / "c.jsonl"
    c.write_text('{"id": "1", "contents": "\\"T\\"\\nt"}\n{"id": "2", "contents": "' + "x" * 2000 + '"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"c.jsonl:2: a line longer than 1,000 characters"):
        list(iter_flashrag_corpus(c))
    monkeypatch.setattr(records, "MAX_LINE_CHARS", 10_000)
    assert len(list(iter_records(f))) == 2  # the same file under a cap it fits
