"""The KG explorer on the synthetic world: entity search, k-hop neighbourhoods checked against a
breadth-first search written here over ``world.triples``, the relation filter, the gold path in the
figure, the agent's KG searches (scripted DynaSearcher turns), and notebook 03 through papermill."""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.test_notebook_pages import CHROMIUM, CHROMIUM_ARGS
from widgets.kg_explorer import (
    GOLD,
    find_entity,
    key_nodes,
    kg_explorer,
    label_lines,
    label_places,
    labelled_nodes,
    network_layout,
    network_traces,
)
from workbench.core.types import Triple
from workbench.tools.kg.explore import Neighbourhood, TripleSet, gold_path_recall, gold_triples, neighbourhood

#: The node labels drawn under an element: each SVG text of a scatter trace, its lines joined by spaces.
LABELS_UNDER = ("(root) => [...root.querySelectorAll('.textpoint text')].map(t => {"
                " const lines = [...t.querySelectorAll('tspan.line')];"
                " return (lines.length ? lines.map(l => l.textContent) : [t.textContent]).join(' '); })")


@pytest.fixture(scope="module")
def kg(world):
    from workbench.tools.toolbox import world_kg

    return world_kg(world)


def bfs(world, start: str, k: int, skip: frozenset[str] = frozenset()) -> set[str]:
    """Entities within ``k`` undirected hops over ``world.triples`` (relations in ``skip`` not followed)."""
    adj: dict[str, set[str]] = {}
    for h, r, t in world.triples:
        if r not in skip:
            adj.setdefault(h, set()).add(t)
            adj.setdefault(t, set()).add(h)
    seen, frontier = {start}, {start}
    for _ in range(k):
        frontier = {n for e in frontier for n in adj.get(e, ())} - seen
        seen |= frontier
    return seen


# --------------------------------------------------------------------------- pure pieces


def test_search_finds_the_entity_by_name_alias_id_and_typo(world, kg):
    ex = world.split("dev")[0]
    anchor = world.entities[ex.meta["anchors"][0]]
    assert find_entity(kg, anchor.name)[0].id == anchor.id
    assert find_entity(kg, anchor.name.upper())[0].id == anchor.id
    assert find_entity(kg, anchor.id)[0].id == anchor.id
    typo = anchor.name[:3] + anchor.name[4:]  # one letter dropped
    assert find_entity(kg, typo)[0].id == anchor.id
    assert find_entity(kg, "zzqx nothing like it") == [] and find_entity(kg, "  ") == []
    person = next(e for e in world.entities.values() if e.type == "person" and e.aliases)
    assert person.id in [m.id for m in find_entity(kg, person.aliases[0])]

    box = kg_explorer(world, entity=anchor.name, question="")
    ex_ = box.explorer
    assert ex_.neighbourhood.center == anchor.id and anchor.name in ex_.status.value
    ex_.entity_w.value = person.name  # typing + Enter
    assert ex_.neighbourhood.center == person.id and ex_.match_w.value == person.id
    ex_.entity_w.value = "zzqx nothing like it"
    assert "No entity matches" in ex_.status.value and ex_.neighbourhood.center == person.id


@pytest.mark.parametrize("pick", [0, 7, 23])
def test_k_hop_node_counts_match_a_direct_bfs(world, kg, pick):
    start = world.split("dev")[pick].meta["anchors"][0]
    for k in (1, 2):
        nb = neighbourhood(kg, start, k, max_nodes=10_000)
        assert set(nb.nodes) == bfs(world, start, k) and len(nb.nodes) == len(set(nb.nodes))
        assert nb.nodes[0] == start and not nb.truncated
        assert all(nb.depth[n] <= k for n in nb.nodes)
        assert all(t.head_id in nb.depth and t.tail_id in nb.depth for t in nb.edges)
    n1, n2 = (len(neighbourhood(kg, start, k, max_nodes=10_000).nodes) for k in (1, 2))
    assert n2 > n1 > 1


def test_node_cap(world, kg):
    start = world.split("dev")[0].meta["anchors"][0]
    full = neighbourhood(kg, start, 3, max_nodes=10_000)
    capped = neighbourhood(kg, start, 3, max_nodes=12)
    assert len(full.nodes) > 12 and len(capped.nodes) == 12 and capped.truncated
    assert capped.nodes == full.nodes[:12]  # the same breadth-first order, cut
    assert all(t.head_id in capped.depth and t.tail_id in capped.depth for t in capped.edges)


def test_relation_filter_removes_the_edges_of_that_relation(world, kg):
    start = world.split("dev")[0].meta["anchors"][0]
    nb = neighbourhood(kg, start, 2, max_nodes=10_000)
    rel, n = Counter(t.relation_id for t in nb.edges).most_common(1)[0]
    assert n > 0
    keep = [r for r in world.relations if r != rel]
    filtered = neighbourhood(kg, start, 2, relations=keep, max_nodes=10_000)
    assert not any(t.relation_id == rel for t in filtered.edges)
    assert set(filtered.nodes) == bfs(world, start, 2, frozenset({rel}))
    assert {(t.head_id, t.relation_id, t.tail_id) for t in filtered.edges} < {
        (t.head_id, t.relation_id, t.tail_id) for t in nb.edges}

    box = kg_explorer(world, entity=start, hops=2, max_nodes=300, question="")
    ex = box.explorer
    assert any(t.relation_id == rel for t in ex.neighbourhood.edges)
    ex.relations_w.value = tuple(keep)  # unselect one relation in the widget
    assert not any(t.relation_id == rel for t in ex.neighbourhood.edges)
    assert len(ex.neighbourhood.nodes) == len(filtered.nodes)
    assert len(ex.fig.data[0].x) == 3 * len(ex.neighbourhood.edges)  # (x0, x1, None) per edge drawn


def test_layout_is_deterministic(world, kg):
    nb = neighbourhood(kg, world.split("dev")[0].meta["anchors"][0], 2)
    a, b = network_layout(nb, seed=0), network_layout(nb, seed=0)
    assert a == b and a[nb.center] == (0.0, 0.0) and set(a) == set(nb.nodes)
    assert network_layout(nb, seed=1) != a


def _reached(nb) -> set[str]:
    """The nodes joined to the centre over the drawn edges."""
    adj: dict[str, set[str]] = {}
    for t in nb.edges:
        adj.setdefault(t.head_id, set()).add(t.tail_id)
        adj.setdefault(t.tail_id, set()).add(t.head_id)
    seen, todo = {nb.center}, [nb.center]
    while todo:
        for m in adj.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def test_a_comparisons_second_gold_path_is_drawn_beside_the_neighbourhood(world, kg):
    """A comparison question's two gold paths start at its two anchors; centred on the first with one hop, the second
    path is a part of the drawing joined to nothing drawn. It sits beside the neighbourhood, its far end within 2.5
    times the neighbourhood's reach from the centre (a tied node at an edge's length, the path's next one past it),
    not pushed off by the layout's repulsion (it was at ten times the reach: 5.2-6.1 against 0.5-1.1)."""
    import math

    found = None
    for ex in world.split("dev") + world.split("test"):
        anchors = ex.meta.get("anchors", [])
        if ex.qtype != "comparison" or len(anchors) < 2:
            continue
        nb = neighbourhood(kg, anchors[0], 1, include=TripleSet(gold_triples(ex)))
        island = set(nb.nodes) - _reached(nb)
        if island:
            found = (ex, nb, island)
            break
    assert found, "the world has a comparison question whose anchors are more than a hop apart"
    ex, nb, island = found
    assert ex.meta["anchors"][1] in island
    for seed in (0, 1, 2):
        pos = network_layout(nb, seed=seed)
        reach = max(math.dist(pos[n], (0.0, 0.0)) for n in set(nb.nodes) - island)
        far = max(math.dist(pos[n], (0.0, 0.0)) for n in island)
        assert far <= 2.5 * reach, (seed, far, reach)
    exp = kg_explorer(world, question=ex.id, hops=1).explorer  # the explorer draws it the same way
    assert set(exp.neighbourhood.nodes) >= island
    drawn = len(exp.fig.data[0].x) + len(exp.fig.data[2].x)  # the grey edges and the gold ones, (x0, x1, None) each
    assert drawn == 3 * len(exp.neighbourhood.edges)  # the tie is not drawn as an edge


def test_gold_path_edges_are_highlighted(world):
    ex = next(e for e in world.split("dev") if len(e.kg_path) == 3 and
              e.kg_path[-1]["tail_id"] not in bfs(world, e.meta["anchors"][0], 1))
    box = kg_explorer(world, question=ex.id, hops=1)
    exp = box.explorer
    gold = gold_triples(ex)
    assert exp.example is ex or exp.example.id == ex.id
    assert exp.neighbourhood.center == ex.meta["anchors"][0]
    # hops=1 cannot reach the path's end, yet the whole path is drawn (its far nodes marked outside)
    drawn = [t for t in exp.neighbourhood.edges if t in exp.gold]
    assert len(drawn) == 3 and exp.neighbourhood.depth[gold[-1].tail_id] is None
    gx, gy = exp.fig.data[2].x, exp.fig.data[2].y  # the gold trace
    assert len(gx) == 9
    segs = {(gx[i], gy[i], gx[i + 1], gy[i + 1]) for i in range(0, 9, 3)}
    pos = exp.positions
    assert segs == {(*pos[t.head_id], *pos[t.tail_id]) for t in gold}
    nodes = exp.fig.data[4]
    gold_nodes = {n for t in gold for n in (t.head_id, t.tail_id)}
    colours = dict(zip(exp.neighbourhood.nodes, nodes.marker.line.color))
    assert {n for n, c in colours.items() if c == GOLD} == gold_nodes
    assert all(t.render() in exp.returned_html.value for t in gold)
    assert exp.metrics()["gold_path_length"] == 3
    exp.select_question("")  # no question: nothing is gold
    assert len(exp.fig.data[2].x) == 0 and GOLD not in nodes.marker.line.color


def _label(text: str) -> str:
    """A node's label as a reader sees it: tags dropped, line breaks as spaces."""
    return html.unescape(re.sub(r"<[^>]+>", "", text.replace("<br>", " ")))


def _connected(nb) -> bool:
    """Every drawn node is reached from the centre over the drawn edges (no island)."""
    return _reached(nb) >= set(nb.nodes)


@pytest.fixture(scope="module")
def crowded(world):
    """A question whose 2-hop neighbourhood is crowded (more than 40 of the 60 nodes the view allows) and whose gold
    path names an entity longer than 24 characters."""
    return next(e for e in world.split("dev") if len(e.kg_path) == 2
                and any(len(d[k]) > 24 for d in e.kg_path for k in ("head", "tail"))
                and len(bfs(world, e.meta["anchors"][0], 2)) > 40)


def test_the_gold_path_and_the_centre_are_labelled_in_full_at_every_depth(world, crowded):
    exp = kg_explorer(world, question=crowded.id, hops=1, max_nodes=60).explorer
    gold = {n for t in gold_triples(crowded) for n in (t.head_id, t.tail_id)}
    for hops in (1, 2, 3, 2, 1, 3, 1, 2):  # each way: 3 → 2, 2 → 1, 1 → 3 ...
        exp.hops_w.value = hops
        nb, nodes = exp.neighbourhood, exp.fig.data[4]
        text = dict(zip(nb.nodes, nodes.text))
        for n in gold | {nb.center}:  # bold, the whole name (wrapped between words)
            assert text[n].startswith("<b>") and _label(text[n]) == nb.names[n], (hops, n, text[n])
        assert max(len(nb.names[n]) for n in gold) > 24
        assert all(h.startswith(f"<b>{html.escape(nb.names[n])}</b>") for n, h in zip(nb.nodes, nodes.hovertext))
        assert exp.view.outputs[0]["data"]["application/vnd.plotly.v1+json"]["data"][4]["text"] == list(nodes.text)
        labelled = {n for n, t in text.items() if t}
        key = key_nodes(nb, exp.gold, exp.returned, [crowded.meta["anchors"][0]])
        assert key <= labelled and all(text[n].startswith("<b>") == (n in key) for n in labelled)
        if hops == 2:  # crowded: other nodes where their label fits, not only the ones that matter
            assert len(nb.nodes) > 40 and len(labelled) > len(key) + 5 and len(labelled) < len(nb.nodes)


def test_a_label_is_drawn_where_it_fits():
    nb = Neighbourhood(center="a", hops=1, nodes=["a", "b", "c", "d"], depth={"a": 0, "b": 1, "c": 1, "d": 1},
                       edges=[], names={"a": "Alpha", "b": "Beta", "c": "Gamma", "d": "A much longer name than most"})
    pos = {"a": (0.0, 0.0), "b": (0.0, 0.0), "c": (1.0, 0.0), "d": (1.0, 0.01)}
    assert labelled_nodes(nb, pos, {"a"}) == {"a", "c"}  # b sits on a's label, d on c's
    assert labelled_nodes(nb, pos, {"a", "b", "d"}) == {"a", "b", "d"}  # the ones that matter at any size
    assert label_lines("A much longer name than most") == ["A much longer name", "than most"]
    # key nodes on top of each other: each label goes where it overlaps none placed before it
    places = label_places(nb, pos, {"a", "b", "c", "d"})
    assert places["a"] == "top center" and places["b"] == "bottom center" and places["c"] == "top center"
    assert places["d"] not in ("top center",)  # c's label is above the point d sits on
    traces = network_traces(nb, pos)
    assert traces[4]["textposition"][0] == "top center" and len(traces[4]["textposition"]) == 4
    assert label_lines("Supercalifragilisticexpialidocious") == ["Supercalifragilisticexpialidocious"]


def test_a_typed_entity_takes_the_question_with_it(world, kg, crowded):
    exp = kg_explorer(world, question=crowded.id, hops=2, max_nodes=60).explorer
    examples = [e for e in world.split("dev") if e.kg_path]
    on_paths = {d[k] for e in examples for d in e.kg_path for k in ("head_id", "tail_id")}

    def shows_no_stale_path() -> None:
        nb, c = exp.neighbourhood, exp.neighbourhood.center
        assert exp.example is None or any(c in (d["head_id"], d["tail_id"]) for d in exp.example.kg_path)
        assert _connected(nb) and exp.question_w.value == (exp.example.id if exp.example else "")
        (x0, x1), (y0, y1) = exp.fig.layout.xaxis.range, exp.fig.layout.yaxis.range
        xs, ys = [exp.positions[n][0] for n in nb.nodes], [exp.positions[n][1] for n in nb.nodes]
        assert x0 < min(xs) and max(xs) < x1 and y0 < min(ys) and max(ys) < y1  # the axes fit the new nodes ...
        assert max((max(xs) - min(xs)) / (x1 - x0), (max(ys) - min(ys)) / (y1 - y0)) > 0.8  # ... and they fill them

    tail = crowded.kg_path[-1]["tail_id"]  # on the question's path: the question stays
    exp.entity_w.value = tail
    assert exp.neighbourhood.center == tail and exp.example.id == crowded.id and len(exp.fig.data[2].x) == 6
    shows_no_stale_path()
    free = next(i for i in kg.entity_ids if i not in on_paths and len(neighbourhood(kg, i, 1).nodes) > 1)
    exp.entity_w.value = free  # on no question's path: no question, nothing gold
    assert exp.neighbourhood.center == free and exp.example is None and len(exp.fig.data[2].x) == 0
    assert GOLD not in exp.fig.data[4].marker.line.color and "Pick a question" in exp.returned_html.value
    assert all(d is not None for d in exp.neighbourhood.depth.values())
    shows_no_stale_path()
    exp.select_question(crowded.id)
    other = next(e for e in examples if not {d[k] for d in e.kg_path for k in ("head_id", "tail_id")} & {
        d[k] for d in crowded.kg_path for k in ("head_id", "tail_id")})
    exp.match_w.options = [("other", other.meta["anchors"][0]), *exp.match_w.options]
    exp.match_w.value = other.meta["anchors"][0]  # another match picked: a question through it
    assert exp.example is not None and exp.example.id != crowded.id
    shows_no_stale_path()


def test_gold_path_labels_are_drawn_in_the_browser(world, crowded, tmp_path):
    """The figure as a browser draws it (its saved HTML, headless Chromium): at 2 hops (crowded), 3 hops and back to
    2, every label the figure holds is drawn as SVG text, the gold path's and the centre's in full."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    from widgets.figures import save_figure

    exp = kg_explorer(world, question=crowded.id, hops=2, max_nodes=60).explorer
    pages = []
    for hops in (2, 3, 2):
        exp.hops_w.value = hops
        nb = exp.neighbourhood
        want = {_label(t) for t in exp.fig.data[4].text if t}
        names = {nb.names[n] for t in gold_triples(crowded) for n in (t.head_id, t.tail_id)} | {nb.names[nb.center]}
        pages.append((hops, save_figure(exp.fig, tmp_path / f"{len(pages)}-{hops}.html"), want, names))
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        pg = browser.new_page(viewport={"width": 1000, "height": 700})
        pg.route("http*://**", lambda route: route.abort())
        for hops, page, want, names in pages:
            pg.goto(page.as_uri())
            pg.wait_for_selector(".js-plotly-plot .textpoint text", timeout=30_000)
            drawn = set(pg.evaluate(f"() => ({LABELS_UNDER})(document)"))
            assert drawn == want and names <= drawn, (hops, names - drawn, want ^ drawn)
        browser.close()


def test_triple_set_matches_by_ids_or_names():
    s = TripleSet([{"head": "Ostrel", "relation": "country", "tail": "Velmark", "head_id": "Q1", "relation_id": "P17",
                    "tail_id": "Q2"}])
    assert Triple("x", "y", "z", "Q1", "P17", "Q2") in s
    assert Triple("ostrel", "Country", "VELMARK") in s
    assert Triple("Ostrel", "capital", "Velmark", "Q1", "P36", "Q2") not in s and "Ostrel" not in s


# --------------------------------------------------------------------------- the agent's KG searches


@pytest.fixture(scope="module")
def kg_run(world, kg, tokenizer, tmp_path_factory, one_thread):
    """DynaSearcher with scripted turns: on the first question it asks the KG for the first gold hop, on
    the second it answers without searching."""

    from workbench.methods import get_protocol
    from workbench.rollout.backends.scripted import ScriptedBackend
    from workbench.rollout.engine import RolloutConfig, rollout
    from workbench.storage.runs import Run
    from workbench.tools.base import Toolbox
    from workbench.tools.kg import make_kg_tool

    exs = [e for e in world.split("dev") if len(e.kg_path) == 2][:2]

    def script(prompt, turn):
        ex = next(e for e in exs if e.question in prompt)
        if turn == 0 and ex is exs[0]:
            g = ex.kg_path[0]
            req = {"query": ex.question, "entity": [g["head"]], "relation": [g["relation"]]}
            return f"<think> look it up </think>\n<search> {json.dumps(req)} </search>"
        return "<think> done </think>\n<answer> \\boxed{" + ex.answers[0] + "} </answer>"

    tools = Toolbox({"search": lambda query, k=5: [], "kg": make_kg_tool(kg)})
    trajs = rollout(exs, get_protocol("dynasearcher"), tools, ScriptedBackend(tokenizer, script), RolloutConfig(max_turns=3),
                    progress=False, meta={"method": "dynasearcher"})
    run = Run.create(tmp_path_factory.mktemp("kg_runs"), kind="eval", run_id="ds", config={"model": "scripted"})
    run.write_trajectories(trajs)
    run.write_examples(exs)
    return run, exs


def test_agent_kg_searches_are_listed_per_question(world, kg_run):
    run, exs = kg_run
    rec = gold_path_recall(run.trajectories(), exs).set_index("example_id")
    assert rec.loc[exs[0].id, "n_kg_calls"] == 1 and rec.loc[exs[0].id, "n_gold_returned"] == 1
    assert rec.loc[exs[1].id, "n_kg_calls"] == 0 and rec.loc[exs[1].id, "n_gold_returned"] == 0
    assert not rec["all_returned"].any()  # only the first hop of one path was asked for

    exp = kg_explorer(world, run).explorer
    assert exp.example.id == exs[0].id  # the run's first question
    first = gold_triples(exs[0])[0]
    assert first in exp.returned and gold_triples(exs[0])[1] not in exp.returned
    h = exp.returned_html.value
    assert "1 / 2" in h and f"✓ {first.render()}" in h and "1 KG calls" in h
    assert f"answered <code>{exs[0].answers[0]}</code> ✔" in h  # the agent's answer beside the gold one
    # returned non-gold triples of the anchor are drawn in the returned colour
    assert len(exp.fig.data[1].x) == 3 * sum(1 for t in exp.neighbourhood.edges if t in exp.returned and t not in exp.gold)
    m = exp.metrics()
    assert (m["kg_questions"], m["kg_calls"], m["kg_gold_returned_share"]) == (2, 1, 0.0)
    assert m["kg_gold_triple_recall"] == pytest.approx(0.25)
    exp.select_question(exs[1].id)
    assert "No KG searches for this question" in exp.returned_html.value


@pytest.mark.slow
def test_notebook_03_executes(world, kg_run, tmp_path):
    from workbench.apps.notebooks import execute_notebook

    run, exs = kg_run
    out = tmp_path / "nb03"
    execute_notebook("03_kg_explorer", out / "03.ipynb", {"run_dir": str(run.path), "out_dir": str(out), "hops": 1})
    m = json.loads((out / "metrics.json").read_text())
    anchor = exs[0].meta["anchors"][0]
    assert (m["n_entities"], m["n_triples"]) == (len(world.entities), len(world.triples))
    assert m["entity_id"] == anchor and m["hops"] == 1
    assert m["neighbourhood_nodes"] == len(bfs(world, anchor, 1)) == m["reach_1"]
    assert m["gold_path_length"] == 2 and m["kg_calls"] == 1 and m["kg_questions"] == 2
    assert (out / "neighbourhood.html").exists() and (out / "reach.html").exists()
    executed = json.loads((out / "03.ipynb").read_text())
    assert all(not any(o.get("output_type") == "error" for o in c.get("outputs", [])) for c in executed["cells"])
