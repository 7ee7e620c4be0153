"""The synthetic world: determinism, consistency (``verify``), sizes, splits, sources, files and caching."""

from __future__ import annotations

import copy
import json
import re

import pytest

from workbench.data.world import (
    AWARD_YEAR,
    QTYPE_SHARE,
    QTYPES,
    SOURCES,
    SPLITS,
    World,
    WorldConfig,
    build_world,
    default_world_config,
    load_world,
    verify,
)
from workbench.data.world import cache as world_cache

TINY = WorldConfig(seed=3, n_entities=60, n_passages=120, n_questions=120)
LARGE = WorldConfig(seed=5, n_entities=800, n_passages=2500, n_questions=1500)
FILES = (
    "wikidata5m_entity.txt",
    "wikidata5m_relation.txt",
    "wikidata5m_all_triplet.txt",
    "qualifiers.jsonl",
    "entity_types.tsv",
    "corpus.jsonl",
    "train.jsonl",
    "dev.jsonl",
    "test.jsonl",
    "world.json",
)


@pytest.fixture(scope="module")
def world() -> World:
    return build_world(default_world_config())


@pytest.fixture(scope="module")
def tiny() -> World:
    return build_world(TINY)


def test_default_config_is_the_repo_file():
    assert default_world_config() == WorldConfig()
    assert WorldConfig().seed == 13 and WorldConfig().n_entities == 300


def test_verify_default_world_is_consistent(world):
    assert verify(world) == []


@pytest.mark.parametrize("config", [TINY, LARGE], ids=["tiny", "large"])
def test_verify_other_sizes(config):
    w = build_world(config)
    assert verify(w) == []
    assert {e.qtype for e in w.examples} == set(QTYPES)
    assert len(w.examples) == config.n_questions


def test_verify_reports_broken_worlds(tiny):
    ex = tiny.examples[0]
    bad = copy.deepcopy(tiny)
    bad.examples[0].answers = ["somebody else"]
    assert any(p.startswith(ex.id) and "answer" in p for p in verify(bad))

    chain = next(e for e in tiny.examples if e.qtype == "chain")
    bad = copy.deepcopy(tiny)
    leaky = next(e for e in bad.examples if e.id == chain.id)
    leaky.question += f" (hint: {chain.kg_path[0]['tail']})"
    assert any("non-anchor" in p for p in verify(bad))

    bad = copy.deepcopy(tiny)
    pid = ex.supporting_ids[-1]
    next(p for p in bad.passages if p.id == pid).text = "Nothing to see here."
    assert any(pid in p and "does not state" in p for p in verify(bad))

    bad = copy.deepcopy(tiny)
    bad.examples[0].sources = ["news", "wiki", "academic"]
    assert any("sources" in p for p in verify(bad))


def test_counts_near_configured_sizes(world):
    c = world.counts()
    cfg = world.config
    assert abs(c["named_entities"] - cfg.n_entities) <= 0.1 * cfg.n_entities
    assert abs(len(world.passages) - cfg.n_passages) <= 0.1 * cfg.n_passages
    assert len(world.examples) == cfg.n_questions
    for q in QTYPES:
        share = c["qtypes"][q] / len(world.examples)
        assert abs(share - QTYPE_SHARE[q]) < 0.03, (q, share)
    assert c["entity_types"]["value"] > 0 and c["qualifiers"] > 0


def test_every_qtype_in_every_split_with_sensible_hops(world):
    for s in SPLITS:
        assert {e.qtype for e in world.split(s)} == set(QTYPES)
    hops = {"1hop": {1}, "compositional": {2}, "inference": {2}, "comparison": {2}, "chain": {3, 4}}
    for e in world.examples:
        assert e.hops in hops[e.qtype], e.id
        assert e.hops == len(e.kg_path) == len(e.decomposition)
    assert {e.hops for e in world.examples if e.qtype == "chain"} == {3, 4}


def test_splits_disjoint_and_cover(world):
    ids = {s: {e.id for e in world.split(s)} for s in SPLITS}
    assert not (ids["train"] & ids["dev"] or ids["train"] & ids["test"] or ids["dev"] & ids["test"])
    assert set().union(*ids.values()) == {e.id for e in world.examples}
    assert len(world.examples) == len({e.id for e in world.examples})
    for s, share in zip(SPLITS, world.config.splits):
        assert abs(len(ids[s]) / len(world.examples) - share) < 0.03
        assert all(re.fullmatch(rf"world-{s}-\d{{4}}", i) for i in ids[s])
    with pytest.raises(ValueError, match="train, dev, test"):
        world.split("validation")


def test_sources_are_those_of_the_supporting_passages(world):
    for e in world.examples:
        passages = [world.passage(pid) for pid in e.supporting_ids]
        assert e.sources == sorted({p.source for p in passages}), e.id
        assert e.supporting_titles == [p.title for p in passages]
    assert {s for e in world.examples for s in e.sources} == set(SOURCES)
    assert any(len(e.sources) > 1 for e in world.examples)


def test_every_passage_has_a_valid_source_and_unique_title(world):
    assert {p.source for p in world.passages} == set(SOURCES)
    assert len({p.id for p in world.passages}) == len({p.title for p in world.passages}) == len(world.passages)


def test_paths_give_the_answers(world):
    triples = set(world.triples)
    for e in world.examples:
        steps = [(s["head_id"], s["relation_id"], s["tail_id"]) for s in e.kg_path]
        assert all(t in triples for t in steps), e.id
        if e.qtype == "comparison":
            continue
        assert all(a[2] == b[0] for a, b in zip(steps, steps[1:])), e.id
        last = world.entities[steps[-1][2]]
        assert e.answers[0] == e.kg_path[-1].get("qualifier_value", last.name)


def test_award_year_questions_are_answerable(world):
    qs = [e for e in world.examples if e.meta["template"] == "award_year"]
    assert qs
    for e in qs:
        (step,) = e.kg_path
        idx = world.triples.index((step["head_id"], step["relation_id"], step["tail_id"]))
        year = world.qualifiers[idx][AWARD_YEAR]
        assert e.answers == [year] and year == step["qualifier_value"]
        text = world.passage(e.supporting_ids[0]).text
        assert year in text and step["tail"] in text


def test_family_trees_have_three_generations(world):
    father = {h: t for h, r, t in world.triples if r == "P22"}
    assert any(father.get(f) for f in father.values())
    assert any(e.meta["template"] == "paternal_grandfather" for e in world.examples)


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    build_world(TINY).save(a)
    build_world(TINY).save(b)
    build_world(WorldConfig(seed=TINY.seed + 1, n_entities=60, n_passages=120, n_questions=120)).save(c)
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "corpus.jsonl").read_bytes() != (c / "corpus.jsonl").read_bytes()
    assert (
        json.loads((a / "world.json").read_text())["fingerprint"]
        != json.loads((c / "world.json").read_text())["fingerprint"]
    )


def test_save_load_round_trip(world, tmp_path):
    out = world.save(tmp_path / "w")
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    loaded = World.load(out)
    assert loaded == world
    assert loaded.fingerprint() == world.fingerprint()
    meta = json.loads((out / "world.json").read_text())
    assert meta["config"] == world.config.to_dict() and meta["counts"]["questions"] == len(world.examples)
    first = json.loads((out / "corpus.jsonl").read_text().splitlines()[0])
    assert set(first) == {"id", "contents", "title", "text", "source"}
    assert first["contents"] == f'"{first["title"]}"\n{first["text"]}'
    entity_line = (out / "wikidata5m_entity.txt").read_text().splitlines()[0].split("\t")
    e = world.entities[entity_line[0]]
    assert entity_line[1:] == [e.name, *e.aliases]
    assert all(len(line.split("\t")) == 3 for line in (out / "wikidata5m_all_triplet.txt").read_text().splitlines())


def test_load_rejects_edited_files(tiny, tmp_path):
    out = tiny.save(tmp_path / "w")
    corpus = out / "corpus.jsonl"
    corpus.write_text(corpus.read_text().replace(tiny.passages[0].title, "Somewhere Else", 1))
    with pytest.raises(ValueError, match="fingerprint"):
        World.load(out)


def test_load_world_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    first = load_world(TINY)
    entries = [p for p in (tmp_path / "world").iterdir() if p.is_dir()]
    assert len(entries) == 1 and (entries[0] / "world.json").exists()

    def no_build(config=None):
        raise AssertionError("rebuilt although cached")

    monkeypatch.setattr(world_cache, "build_world", no_build)
    assert load_world(TINY) == first
    assert [p for p in (tmp_path / "world").iterdir() if p.is_dir()] == entries  # no temp folders left
    with pytest.raises(AssertionError, match="rebuilt"):
        load_world(TINY, cache=False)


def test_from_file_rejects_unknown_key(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"seed": 1, "n_entities": 50, "splits": [0.8, 0.1, 0.1]}))
    cfg = WorldConfig.from_file(good)
    assert cfg.seed == 1 and cfg.splits == (0.8, 0.1, 0.1) and cfg.n_questions == WorldConfig().n_questions
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"seed": 1, "n_entitys": 50}))
    with pytest.raises(ValueError, match="'n_entitys'.*n_entities"):
        WorldConfig.from_file(bad)
    with pytest.raises(ValueError, match="splits"):
        WorldConfig(splits=(0.5, 0.2, 0.2))


@pytest.mark.parametrize("content, message", [
    (None, "not a readable world config JSON file \\(IsADirectoryError"),  # a folder where a file belongs
    ("nonsense", "not a readable world config JSON file \\(JSONDecodeError"),
    ('{"seed": "x"}', "WorldConfig.seed must be an int, got 'x'"),
])
def test_a_bad_world_config_file_is_one_error_naming_it(tmp_path, content, message, capsys):
    from workbench.apps.cli import main

    path = tmp_path / "cfg"
    path.mkdir() if content is None else path.write_text(content)
    with pytest.raises(ValueError, match=f"{path}: {message}"):
        WorldConfig.from_file(path)
    assert main(["world", "--config", str(path)]) == 2  # the CLI prints it as one line, no traceback
    err = capsys.readouterr().err
    assert err.startswith(f"workbench world: error: {path}") and err.count("\n") == 1


def test_lookups(world):
    person = next(e for e in world.entities.values() if e.type == "person")
    assert world.entity_by_name(person.aliases[0].upper()) is person
    assert world.entity_by_name(person.name) is person
    with pytest.raises(KeyError):
        world.entity_by_name("Nobody Anywhere")
    p = world.passages[5]
    assert world.passage(p.id) is p
    with pytest.raises(KeyError):
        world.passage("p-none")
    assert {
        "P19",
        "P569",
        "P57",
        "P50",
        "P26",
        "P22",
        "P25",
        "P27",
        "P131",
        "P1376",
        "P166",
        "P112",
        "P108",
        "P69",
    } <= set(world.relations)
    assert world.relations["P131"].aliases[0] == "located in"
