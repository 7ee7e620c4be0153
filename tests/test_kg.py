"""Knowledge-graph storage, loaders, matching, DynaSearcher search and the Table 6 KG filter."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from workbench.core.types import Triple
from workbench.tools.base import Toolbox, render_triples
from workbench.tools.kg import (
    FilterResult,
    KnowledgeGraph,
    StringTable,
    approx_token_count,
    build_filter_prompt,
    kg_filter,
    kg_search,
    make_kg_tool,
    name_words,
    normalize_name,
    parse_filter_answer,
)
from workbench.tools.kg.strings import (
    _normalize_block,
    _py_delete_hashes,
    _py_hash,
    _seg_delete_hashes,
    _seg_hash,
    _str_hash,
)
from workbench.util.paths import samples_dir

# ----------------------------------------------------------------------------- fixtures

ENTITIES = {
    "Q1": ["Velmora Quist", "V. Quist", "Quist, Velmora"],
    "Q2": ["Ostrel"],
    "Q3": ["Brannick Hall"],
    "Q4": ["Harrowgate Bridge"],
    "Q5": ["Tamsin Vale"],
    "Q6": ["Human", "person"],
}
RELATIONS = {
    "P19": ["place of birth", "birthplace", "born in"],
    "P20": ["place of death", "died in"],
    "P84": ["architect"],
    "P31": ["instance of", "is a"],
    "P26": ["spouse", "married to"],
}
TRIPLES = [
    ("Q1", "P19", "Q2"),
    ("Q1", "P20", "Q5"),
    ("Q3", "P84", "Q1"),
    ("Q4", "P84", "Q1"),
    ("Q1", "P31", "Q6"),
    ("Q5", "P26", "Q7"),  # Q7 has no alias line
]


def write_wikidata5m(d, triples=TRIPLES, extra_lines=()):
    d.mkdir(parents=True, exist_ok=True)
    (d / "wikidata5m_entity.txt").write_text("".join(f"{k}\t" + "\t".join(v) + "\n" for k, v in ENTITIES.items()))
    (d / "wikidata5m_relation.txt").write_text("".join(f"{k}\t" + "\t".join(v) + "\n" for k, v in RELATIONS.items()))
    lines = ["\t".join(t) for t in triples] + list(extra_lines)
    (d / "wikidata5m_all_triplet.txt").write_text("\n".join(lines) + "\n")
    return d


@pytest.fixture(scope="module")
def kg(tmp_path_factory):
    d = write_wikidata5m(tmp_path_factory.mktemp("w5m"), extra_lines=["Q1\tP19", "", "Q1\tP19\tQ2"])
    return KnowledgeGraph.from_wikidata5m(d)


# ----------------------------------------------------------------------------- hashing and normalization


def test_vectorized_hashes_match_python():
    words = ["velmora", "quist", "ab", "", "ünïcode", "aab"]
    t = StringTable.from_strings(words)
    h = _seg_hash(t.data, t.offsets[:-1], t.byte_lengths())
    assert [int(x) for x in h] == [_py_hash(w.encode()) for w in words]
    cp = np.frombuffer(t.text().encode("utf-32-le"), np.uint32)
    nl = np.flatnonzero(cp == 10)
    starts = np.concatenate([[0], nl[:-1] + 1])
    keys, seg = _seg_delete_hashes(cp, starts, nl - starts)
    for i, w in enumerate(words):
        assert set(int(k) for k in keys[seg == i]) == _py_delete_hashes(w, 1)[0]
    assert _str_hash("velmra") in _py_delete_hashes("velmora", 1)[0]


def test_fast_normalization_equals_normalize_name():
    rng = random.Random(0)
    alphabet = list("abXY09 _-.,!'/()\t") + ["é", "Ü", "ß", "ﬁ", "Σ", "\u3000", "«", "İ", "\u00a0", "\x85", "Ｔ", "  "]
    strs = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))) for _ in range(3000)]
    strs += ["  AC/DC  ", "...", "ΟΔΟΣ", "a__b", "x\x7fy", "Velmora Quist!"]
    t = StringTable.from_strings(strs)
    nb, wb = _normalize_block(t.data)
    norm = nb.tobytes().decode().split("\n")[:-1]
    words = wb.tobytes().decode().split("\n")[:-1]
    for i, s in enumerate(t):
        assert norm[i] == normalize_name(s), s
        assert [w for w in words[i].split(" ") if w] == name_words(normalize_name(s)), s


def test_string_table_round_trip():
    t = StringTable.from_strings(["a", "b\tc", "", "日本"])
    assert list(t) == ["a", "b c", "", "日本"]
    assert [t[i] for i in range(4)] == ["a", "b c", "", "日本"]
    assert list(t.take(np.array([3, 0]))) == ["日本", "a"]


# ----------------------------------------------------------------------------- loaders


def test_wikidata5m_loader(kg):
    assert kg.num_entities == 7 and kg.num_relations == 5
    assert kg.num_triples == 6  # the repeated line is deduplicated
    assert kg.stats["malformed_lines"] == 1
    assert "wikidata5m_all_triplet.txt:7" in kg.stats["malformed_examples"][0]
    assert kg.stats["duplicate_triples"] == 1
    q7 = kg.entity_index("Q7")
    assert kg.entity_name(q7) == "Q7"  # no alias line: the id is the name
    assert kg.entity_aliases(kg.entity_index("Q1")) == ENTITIES["Q1"]


def test_wikidata5m_split_files_merged_and_deduplicated(tmp_path):
    d = write_wikidata5m(tmp_path)
    (d / "wikidata5m_all_triplet.txt").unlink()
    (d / "wikidata5m_transductive").mkdir()
    (d / "wikidata5m_transductive" / "wikidata5m_transductive_train.txt").write_text("Q1\tP19\tQ2\nQ3\tP84\tQ1\n")
    (d / "wikidata5m_transductive_valid.txt").write_text("Q1\tP19\tQ2\n")
    (d / "wikidata5m_inductive_test.txt").write_text("Q4\tP84\tQ1\nQ1\tP19\tQ2\n")
    kg = KnowledgeGraph.from_wikidata5m(d)
    assert kg.num_triples == 3
    assert len(kg.stats["files"]) == 2 + 3


def test_triple_reader_tolerates_odd_lines(tmp_path):
    from array import array

    from workbench.tools.kg.readers import _read_triple_file, _Registry

    lines = [
        "Q1\tP19\tQ2",
        "Q2\tP19\tQ9",  # Q9 unknown: registered by id
        "Q3 P84 Q1",  # space separated
        "Q4\tP84\tQ1\r",  # CRLF
        "",
        "Q1\tP19",  # malformed (line 6)
        "Qé\tP20\tQ1",  # non-ASCII id
        "Q1\t\tQ2",  # empty field (line 8)
        "  Q5\tP26\tQ1  ",  # padded
        "Q9\tP31\tQ6",
    ]
    path = tmp_path / "t.txt"
    path.write_bytes("\n".join(lines).encode())  # no final newline
    ents, rels = _Registry(), _Registry()
    for q in ("Q1", "Q2", "Q3", "Q4", "Q5", "Q6"):
        ents.add(q, [q.lower()])
    h, r, t, stats = array("i"), array("i"), array("i"), {}
    _read_triple_file(path, ents, rels, h, r, t, stats)
    got = [(ents.ids[a], rels.ids[b], ents.ids[c]) for a, b, c in zip(h, r, t)]
    assert got == [
        ("Q1", "P19", "Q2"), ("Q2", "P19", "Q9"), ("Q3", "P84", "Q1"), ("Q4", "P84", "Q1"),
        ("Qé", "P20", "Q1"), ("Q5", "P26", "Q1"), ("Q9", "P31", "Q6"),
    ]  # fmt: skip
    assert stats["malformed_lines"] == 2
    assert [e.split(": ")[0].rsplit(":", 1)[1] for e in stats["malformed_examples"]] == ["6", "8"]
    assert ents.ids.count("Q9") == 1


def test_loader_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        KnowledgeGraph.from_wikidata5m(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="wikidata5m_entity.txt"):
        KnowledgeGraph.from_wikidata5m(tmp_path)
    d = write_wikidata5m(tmp_path / "a")
    (d / "wikidata5m_all_triplet.txt").unlink()
    with pytest.raises(FileNotFoundError, match="no Wikidata5M triple file"):
        KnowledgeGraph.from_wikidata5m(d)
    d = write_wikidata5m(tmp_path / "b")
    (d / "wikidata5m_entity.txt").write_text("Q1\tVelmora\n\tno id here\n")
    with pytest.raises(ValueError, match=r"wikidata5m_entity.txt:2"):
        KnowledgeGraph.from_wikidata5m(d)
    d = write_wikidata5m(tmp_path / "c", triples=[], extra_lines=["only two\tfields", "x"])
    with pytest.raises(ValueError, match="no valid triple"):
        KnowledgeGraph.from_wikidata5m(d)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        KnowledgeGraph.from_fb15k237(tmp_path / "missing.txt")


def test_codex_loader(tmp_path):
    (tmp_path / "train.txt").write_text("Q1\tP27\tQ142\nQ2\tP27\tQ142\nbad line\n")
    (tmp_path / "relations_en.json").write_text(
        json.dumps({"P27": {"label": "country of citizenship", "description": "x"}})
    )
    (tmp_path / "entities_en.json").write_text(json.dumps({"Q142": {"label": "France"}}))
    kg = KnowledgeGraph.from_codex(
        tmp_path / "train.txt", tmp_path / "relations_en.json", tmp_path / "entities_en.json"
    )
    assert kg.num_triples == 2 and kg.stats["malformed_lines"] == 1
    assert kg.triples_of("Q1")[0].render() == "(Q1, country of citizenship, France)"
    (tmp_path / "broken.json").write_text('{"P27": ')
    with pytest.raises(ValueError, match="broken.json"):
        KnowledgeGraph.from_codex(tmp_path / "train.txt", tmp_path / "broken.json")


def test_fb15k237_loader_relation_names(tmp_path):
    (tmp_path / "t.tsv").write_text("/m/01\t/people/person/place_of_birth\t/m/02\n")
    (tmp_path / "e.txt").write_text("/m/01\tGary Rydstrom\n/m/02\tChicago\n")
    (tmp_path / "r.txt").write_text("/people/person/place_of_birth\tpeople person place of birth\n")
    plain = KnowledgeGraph.from_fb15k237(tmp_path / "t.tsv", tmp_path / "e.txt")
    assert plain.triples_of("/m/01")[0].render() == "(Gary Rydstrom, place of birth, Chicago)"
    named = KnowledgeGraph.from_fb15k237(tmp_path / "t.tsv", tmp_path / "e.txt", tmp_path / "r.txt")
    assert named.relation_names == ["people person place of birth"]


def test_codex_sample():
    d = samples_dir() / "codex_s"
    kg = KnowledgeGraph.from_codex(d / "test.txt", d / "relations_en.json")
    n_lines = sum(1 for line in open(d / "test.txt") if line.strip())
    labels = json.loads((d / "relations_en.json").read_text())
    assert kg.num_triples == n_lines and kg.stats["malformed_lines"] == 0
    first = open(d / "test.txt").readline().split()
    t = [x for x in kg.triples_of(first[0], "out") if x.tail_id == first[2] and x.relation_id == first[1]][0]
    assert t.head == first[0] and t.relation == labels[first[1]]["label"]  # no entity labels: ids
    assert kg.search([first[2]]).triples  # entities are found by id


def test_fb15k237_sample():
    d = samples_dir() / "fb15k237"
    kg = KnowledgeGraph.from_fb15k237(d / "triples.tsv", d / "entity2text.txt", d / "relation2text.txt")
    assert kg.num_triples == 3000 and kg.stats["malformed_lines"] == 0
    mid, name = open(d / "entity2text.txt").readline().rstrip("\n").split("\t")
    res = kg.search([name.upper()])
    assert res.matched[name.upper()][0] == mid
    assert all(mid in (t.head_id, t.tail_id) for t in res.triples) and res.triples


def test_from_triples_and_save_load(tmp_path):
    kg = KnowledgeGraph.from_triples(
        [Triple("Paris", "capital of", "France"), ("Q90", "P1376", "Q142")],
        entity_names={"Q90": "Paris", "Q142": "France"},
        relation_names={"P1376": ["capital of", "is capital of"]},
        entity_aliases={"Q90": ["City of Light"]},
    )
    assert kg.num_entities == 4 and kg.num_triples == 2
    path = kg.save(tmp_path / "kg.npz")
    back = KnowledgeGraph.load(path)
    assert back.num_triples == 2 and back.stats["triples"] == 2
    assert back.search(["city of light"]).matched == {"city of light": ["Q90"]}
    with pytest.raises(ValueError, match="row 0"):
        KnowledgeGraph.from_triples([("a", "b")])


# ----------------------------------------------------------------------------- matching


@pytest.mark.parametrize(
    "name, exact",
    [("Velmora Quist", True), ("velmora quist", True), ("VELMORA  QUIST!", True), ("v. quist", True),
     ("Quist, Velmora", True), ("Q1", True), ("Velmra Quist", False), ("Vlemora Quist", False),
     ("Velmora Quistt", False), ("Velmorra Quist", False), ("Quist Velmora", False),
     ("Velmora Wuist", False)],  # a typo that changes the sorted word order
)  # fmt: skip
def test_match_exact_case_alias_typo_id(kg, name, exact):
    m = kg.match_entity(name)
    assert m and m[0].id == "Q1"
    assert m[0].exact == exact


def test_typo_scores_and_no_false_match(kg):
    m = kg.match_entity("Velmra Quist")
    assert not m[0].exact and 85 <= m[0].score < 100
    assert kg.match_entity("Zzyzx Qwerty") == []
    assert kg.match_entity("Vel") == []  # too short to be fuzzy


def test_rare_typo_word_beats_common_exact_word(monkeypatch):
    # 300 "Prashous <8 letters>" names of the query's length crowd the postings budget; the rare
    # stand-in of the typo'd word ("hiremour" -> "hiremjour") must still bring the target in
    import workbench.tools.kg.search as kgmod

    rng = random.Random(0)
    names = {f"F{i}": "Prashous " + "".join(rng.choices("bcdfgklmnpst", k=8)) for i in range(300)}
    names["T"] = "Prashous Hiremjour"
    kg = KnowledgeGraph.from_triples([(k, "r", "T") for k in names if k != "T"], entity_names=names,
                                     max_fuzzy_candidates=20)  # fmt: skip
    monkeypatch.setattr(kgmod, "MAX_FUZZY_POSTINGS", 100)
    assert [m.id for m in kg.match_entity("Prashous Hiremour")] == ["T"]


def test_fuzzy_threshold_is_configurable(tmp_path):
    d = write_wikidata5m(tmp_path)
    strict = KnowledgeGraph.from_wikidata5m(d, threshold=99)
    assert strict.match_entity("Velmra Quist") == []
    with pytest.raises(ValueError, match="threshold"):
        KnowledgeGraph.from_wikidata5m(d, threshold=0)


# ----------------------------------------------------------------------------- search


def test_one_hop_both_directions(kg):
    res = kg.search(["Velmora Quist"])
    got = {(t.head_id, t.relation_id, t.tail_id) for t in res.triples}
    assert got == {t for t in TRIPLES if "Q1" in (t[0], t[2])}
    assert res.matched == {"Velmora Quist": ["Q1"]} and not res.unmatched and not res.truncated
    heads = {t.head for t in res.triples}
    assert {"Brannick Hall", "Harrowgate Bridge", "Velmora Quist"} == heads


def test_ranking_by_shared_words(kg):
    by_death = kg.search(["Velmora Quist"], relations=["death"])
    assert by_death.triples[0].relation == "place of death"
    by_birth = kg.search(["Velmora Quist"], relations=["birth place"])
    assert by_birth.triples[0].relation == "place of birth"
    assert by_birth.triples[0].score == 4.0  # velmora, quist, birth, place
    by_query = kg.search(["Velmora Quist"], query="Who built Harrowgate Bridge?")
    assert by_query.triples[0].head == "Harrowgate Bridge"


def test_relation_words_break_ties():
    # both candidate triples share one word ("river"); the one sharing it through its relation wins,
    # although the other comes first in storage
    kg = KnowledgeGraph.from_triples(
        [("X", "R1", "A"), ("X", "R2", "B")],
        entity_names={"X": "Ostrel", "A": "River Dune", "B": "Tallow"},
        relation_names={"R1": "flows into", "R2": "river basin"},
    )
    res = kg.search(["Ostrel"], relations=["river"])
    assert [t.relation for t in res.triples] == ["river basin", "flows into"]
    assert [t.score for t in res.triples] == [2.0, 2.0]
    plain = kg.search(["Ostrel"])
    assert [t.relation for t in plain.triples] == ["flows into", "river basin"]  # storage order


def test_tail_words_count_and_wordless_names_are_fine():
    kg = KnowledgeGraph.from_triples(
        [("X", "r", "A"), ("X", "r", "B"), ("X", "r", "C")],
        entity_names={"X": "Hub", "A": "Red Fox", "B": "...", "C": "Blue Fox"},
        relation_names={"r": "sees"},
    )
    res = kg.search(["Hub"], query="the blue fox")
    assert [(t.tail, t.score) for t in res.triples] == [("Blue Fox", 3.0), ("Red Fox", 2.0), ("...", 1.0)]


def test_exact_matches_rank_before_fuzzy_ones():
    kg = KnowledgeGraph.from_triples(
        [("B", "R", "D"), ("A", "R", "C")],
        entity_names={"A": "Velmora", "B": "Halvard Brune", "C": "Tern", "D": "Moss"},
        relation_names={"R": "sibling"},
    )
    res = kg.search(["Halvard Brunne", "Velmora"])  # one shared word each ("halvard", "velmora")
    assert res.matched == {"Halvard Brunne": ["B"], "Velmora": ["A"]}
    assert [t.head_id for t in res.triples] == ["A", "B"]
    assert [t.score for t in res.triples] == [1.0, 1.0]


@pytest.fixture(scope="module")
def star():
    triples = [("hub", "r", f"n{i}") for i in range(150)]
    names = {f"n{i}": f"Node Number {i}" for i in range(150)}
    names["hub"] = "Central Hub"
    return KnowledgeGraph.from_triples(triples, entity_names=names, relation_names={"r": "links to"})


def test_max_triples_cap(star):
    res = star.search(["central hub"])
    assert len(res.triples) == 100 and res.truncated and res.n_candidates == 150
    assert len(star.search(["central hub"], max_triples=7).triples) == 7


def test_token_cap_with_counter(star):
    def ten_per_line(s):
        return 10 * len(s.split("\n"))

    res = star.search(["central hub"], max_tokens=55, count_tokens=ten_per_line)
    assert len(res.triples) == 5 and res.truncated
    assert ten_per_line(res.render()) <= 55
    default = star.search(["central hub"], max_tokens=50)
    assert approx_token_count(render_triples(default.triples)) <= 50
    assert approx_token_count(render_triples(star.search(["central hub"], max_tokens=60).triples)) > 50


@pytest.mark.parametrize(
    "entities",
    [[], "", [""], ["x" * 10_000], ["\x00\x07\x1b[31m"], ["日本語の名前"], [1, {"a": 1}, None, ["nested"]], None, 42,
     {"entity": "Velmora"}, ["Zzyzx"], ["".join(random.Random(1).choices("abcdefghij", k=300))], [float("nan")], ["<answer>Paris</answer>"]],
)  # fmt: skip
def test_bad_inputs_never_raise(kg, entities):
    res = kg.search(entities, relations="not a list", query={"q": 1}, max_triples="abc")
    assert res.triples == [] and res.matched == {}
    assert isinstance(res.render(), str) and res.render().startswith("No knowledge-graph entity matched")


def test_bad_inputs_are_recorded(kg):
    res = kg.search([1, {"a": 1}, "", "Nobody Here", "Velmora Quist"], relations=[None], query=None)
    assert res.unmatched == ["1", "Nobody Here"]
    assert res.matched == {"Velmora Quist": ["Q1"]}
    assert any("not a string" in s for s in res.skipped) and any("empty" in s for s in res.skipped)
    assert kg.search(["Nobody Here"]).render() == "No knowledge-graph entity matched: Nobody Here"
    huge = kg.search(["Velmora Quist"], query="birth " * 5000)
    assert huge.triples[0].relation == "place of birth"


def test_kg_search_and_tool(kg):
    assert kg_search(kg, ["Ostrel"]).triples[0].tail == "Ostrel"
    tb = Toolbox({"kg": make_kg_tool(kg)}, timeout_s=None)
    call = tb.call("kg", entity=["Velmora Quist"], relation=["died in"], query="")
    assert call.ok and call.triples()[0].relation == "place of death"
    assert tb.call("kg", entities=[{"bad": 1}]).results == []


# ----------------------------------------------------------------------------- KG filter (Table 6)

FT = [
    Triple("Avatar", "distinct element of", "character code", "x1", "y1", "x2"),
    Triple("Avatar", "director", "James Cameron", "x1", "y2", "x3"),
    Triple("Avatar", "cast member", "Sam Worthington", "x1", "y3", "x4"),
    Triple("Avatar", "publication date", "2009", "x1", "y4", "x5"),
    Triple("Avatar", "genre", "science fiction film", "x1", "y5", "x6"),
    Triple("Avatar", "composer", "James Horner", "x1", "y6", "x7"),
]


def run_filter(answer, **kw):
    seen = {}

    def llm(prompt):
        seen["prompt"] = prompt
        if isinstance(answer, Exception):
            raise answer
        return answer

    res = kg_filter(FT, "Who directed Avatar?", "director of Avatar", llm=llm, **kw)
    assert res.prompt == seen.get("prompt", res.prompt)
    return res


def test_filter_prompt_holds_question_and_triples():
    p = build_filter_prompt(
        FT, "Who directed Avatar?", "director of Avatar", "who is the director", ["Avatar"], ["director"]
    )
    assert p.startswith("You are an information extraction expert.")
    assert "retain the exact one." in p and "Now, start!" in p
    assert '"question": "Who directed Avatar?"' in p and '"sub_query": "who is the director"' in p
    assert '[2] {"entity1_id": "x1", "entity1": "Avatar", "relation_id": "y2", "relation": "director"' in p
    assert '"entity2": "James Horner"' in p and p.rstrip().endswith("start extracting:")


@pytest.mark.parametrize(
    "answer, kept",
    [
        ("<evidence>\nentity1; relation; entity2\nAvatar; director; James Cameron\n</evidence>", [1]),
        ("<evidence> entity1; relation; entity2 Avatar; director; James Cameron </evidence>", [1]),
        ("<think>hmm 4</think><evidence>\navatar; DIRECTOR; james cameron\nAvatar; composer; James Horner\n</evidence>",
         [1, 5]),
        ("2, 3", [1, 2]),
        ("[6]\n[2]", [5, 1]),
        ("(Avatar, cast member, Sam Worthington)", [2]),
        ('{"entity1_id": "x1", "entity1": "Avatar", "relation_id": "y4", "relation": "publication date", '
         '"entity2_id": "x5", "entity2": "2009"}', [3]),
        ("1. Avatar; genre; science fiction film", [4]),
        ("<evidence>None</evidence>", []),
        ("None", []),
    ],
)  # fmt: skip
def test_filter_parses_good_answers(answer, kept):
    res = run_filter(answer)
    assert res.ok and res.error is None and res.raw == answer
    assert res.kept_indices == kept and res.kept == [FT[i] for i in kept]


def test_filter_keeps_at_most_max_keep():
    res = run_filter("1, 2, 3, 4, 5, 6", max_keep=3)
    assert res.ok and res.kept == FT[:3]


@pytest.mark.parametrize(
    "answer, why",
    [
        ("The director of Avatar is clearly a famous person.", "prose"),
        ("", "empty"),
        ("   ", "empty"),
        ("<evidence>Titanic; director; James Cameron</evidence>", "no given triple"),
        (RuntimeError("backend down"), "backend down"),
        (None, "empty"),
    ],
)
def test_filter_falls_back_on_unusable_answers(answer, why):
    res = run_filter(answer)
    assert isinstance(res, FilterResult)
    assert not res.ok and why in res.error
    assert res.kept == FT[:5]


def test_parse_filter_answer_direct():
    assert parse_filter_answer("7, 8", FT) == (None, "answer is prose without evidence or indices")
    assert kg_filter([], "q", "q", llm=lambda p: 1 / 0).ok


# ----------------------------------------------------------------------------- real files: roles, labels, linking

CODEX = Path(__file__).parent / "fixtures" / "codex"  # CoDEx-S triples among 24 labelled entities


def test_load_kg_codex_with_labels_and_linking():
    from workbench.tools.kg.files import load_kg
    from workbench.tools.kg.linking import link_entities, linking_kg_tool

    kg = load_kg([CODEX / "test.txt", CODEX / "entities_en.json", CODEX / "relations_en.json"])
    assert kg.num_triples == 28 and kg.stats["labels"] is True
    assert kg.stats["files_by_role"]["entities"] == [str(CODEX / "entities_en.json")]
    links = link_entities("Which language did the physicist Albert Einstien speak, and does Germany "
                          "have diplomatic relations with Japan?", kg)
    assert [(e.mention, e.id, e.exact) for e in links] == [
        ("Albert Einstien", "Q937", False), ("Germany", "Q183", True), ("Japan", "Q17", True)]
    # DynaSearcher's entity field: an unmatched phrase still hits through the entities linked inside it
    tool = linking_kg_tool(kg, make_kg_tool(kg))
    assert not kg.match_entity("the physicist Albert Einstein")
    triples = tool(entity=["the physicist Albert Einstein"], relation=["language"])
    assert [(t.head, t.tail) for t in triples] == [("Albert Einstein", "English")]


def test_load_kg_without_entity_labels_warns_once():
    from workbench.tools.kg.files import NO_LABELS_WARNING, load_kg

    fx = samples_dir() / "codex_s"
    files = [fx / "test.txt", fx / "relations_en.json"]
    with pytest.warns(UserWarning) as rec:
        kg = load_kg(files)
    assert [str(w.message) for w in rec if "entity labels" in str(w.message)] == [NO_LABELS_WARNING]
    assert kg.stats["labels"] is False and kg.entity_name(0).startswith("Q")


def test_load_kg_refuses_a_types_file_as_names(tmp_path):
    from workbench.tools.kg.files import load_kg

    with pytest.raises(ValueError, match="types file"):
        load_kg([CODEX / "test.txt", CODEX / "types_en.json"])
    disguised = tmp_path / "labels.json"  # same shape as entity names, wrong ids: refused by coverage
    disguised.write_text((CODEX / "types_en.json").read_text())
    with pytest.raises(ValueError, match=r"names only 0 of the 24 entities"):
        load_kg([CODEX / "test.txt", disguised])
    e2t = tmp_path / "entity2types.json"
    e2t.write_text(json.dumps({"Q937": ["Q5"], "Q183": ["Q6256"]}))
    with pytest.raises(ValueError, match="types"):
        load_kg([CODEX / "test.txt", e2t])
    long = tmp_path / "entity2textlong.txt"
    long.write_text("".join(f"Q{i}\t{'A long description of the entity. ' * 5}\n" for i in (937, 183)))
    with pytest.raises(ValueError, match="descriptions"):
        load_kg([CODEX / "test.txt", long])


def test_load_kg_fb15k237_folder_and_wikidata5m_files(tmp_path):
    from workbench.tools.kg.files import load_kg

    kg = load_kg([samples_dir() / "fb15k237"])  # a folder: roles from the files' content
    assert kg.stats["labels"] is True and kg.num_triples == 3000
    assert set(kg.stats["files_by_role"]) == {"triples", "entities", "relations"}
    (tmp_path / "wikidata5m_entity.txt").write_text("Q937\tAlbert Einstein\tEinstein\nQ3012\tUlm\n")
    (tmp_path / "wikidata5m_relation.txt").write_text("P19\tplace of birth\tbirthplace\n")
    (tmp_path / "wikidata5m_transductive_train.txt").write_text("Q937\tP19\tQ3012\n")
    files = sorted(tmp_path.iterdir())
    for given in ([tmp_path], files):
        kg = load_kg(given)
        assert [(t.head, t.relation, t.tail) for t in kg.search(["Einstein"]).triples] == [
            ("Albert Einstein", "place of birth", "Ulm")]


@pytest.mark.slow
def test_notebook_03_on_kg_files(tmp_path):
    """Notebook 03's `kg_files` parameter: the explorer on a real KG (CoDEx files with their names)."""
    from workbench.apps.notebooks import execute_notebook

    files = [str((CODEX / f).resolve()) for f in ("test.txt", "entities_en.json", "relations_en.json")]
    params = {"kg_files": files, "entity": "Albert Einstein", "out_dir": str(tmp_path), "hops": 1}
    execute_notebook("03_kg_explorer", tmp_path / "03.ipynb", params)
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert (m["n_triples"], m["entity_id"], m["neighbourhood_edges"]) == (28, "Q937", 1)
