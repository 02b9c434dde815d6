"""Round max per signal, RRF and the carry from the round before, on hand-computed cases."""

from llama_index_vmem import schema
from llama_index_vmem.fusion import add_ranking, best_before, carry_forward, rank_rounds, rrf, walk_back
from llama_index_vmem.neighbours import sessions_before
from llama_index_vmem.store.base import Hit


def hit(uid, rid, seq, score):
    return Hit(uid, score, {"round_id": rid, "seq": seq})


def test_round_takes_its_best_unit():
    ranked = rank_rounds([hit("u1", "A", 1, 0.2), hit("u2", "B", 2, 0.5), hit("u3", "A", 1, 0.9)])
    assert [(h.payload["round_id"], h.id) for h in ranked] == [("A", "u3"), ("B", "u2")]


def test_rrf_sums_reciprocal_ranks():
    dense = rank_rounds([hit("a", "A", 1, 0.9), hit("b", "B", 2, 0.8)])
    sparse = rank_rounds([hit("b2", "B", 2, 12.0), hit("c", "C", 3, 3.0)])
    fused = rrf({"dense": dense, "sparse": sparse}, kappa=60)
    assert [f.id for f in fused] == ["B", "A", "C"]
    b = fused[0]
    assert b.ranks == {"dense": 2, "sparse": 1}
    assert abs(b.score - (1 / 62 + 1 / 61)) < 1e-12
    assert abs(fused[1].score - 1 / 61) < 1e-12 and abs(fused[2].score - 1 / 62) < 1e-12


def test_a_tie_goes_to_the_round_the_tie_break_signal_ranks_higher_then_the_earlier_round():
    """Visual (2, 1) against text (1, 2) tie exactly; the earlier round A takes it unless visual breaks ties."""
    rankings = {"visual": [hit("b", "B", 2, 0.9), hit("a", "A", 1, 0.8)], "text": [hit("a", "A", 1, 0.7), hit("b", "B", 2, 0.6)]}
    assert [f.id for f in rrf(rankings, kappa=60)] == ["A", "B"]
    fused = rrf(rankings, kappa=60, tie_break="visual")
    assert [f.id for f in fused] == ["B", "A"] and fused[0].score == fused[1].score
    assert [f.id for f in rrf(rankings, kappa=60, tie_break="absent")] == ["A", "B"]


def test_rrf_ties_go_to_the_earlier_round():
    fused = rrf({"x": rank_rounds([hit("a", "A", 5, 1.0)]), "y": rank_rounds([hit("b", "B", 2, 1.0)])}, kappa=60)
    assert [f.id for f in fused] == ["B", "A"]


def test_rrf_ties_exactly_when_two_rounds_hold_the_same_ranks_in_another_order():
    """Added in signal order, 1/61 + 1/67 + 1/62 and 1/62 + 1/61 + 1/67 differ in the last bit."""
    filler = [hit(f"f{i}", f"F{i}", 100 + i, 1.0) for i in range(8)]
    rankings = {"a": [hit("x", "X", 1, 1.0), hit("y", "Y", 2, 1.0)],
                "b": [hit("y", "Y", 2, 1.0)] + filler[:5] + [hit("x", "X", 1, 1.0)],
                "c": [filler[5], hit("x", "X", 1, 1.0)] + filler[6:] + filler[:2] + [hit("y", "Y", 2, 1.0)]}
    top = rrf(rankings, kappa=60)[:2]
    assert [(f.id, f.ranks) for f in top] == [("X", {"a": 1, "b": 7, "c": 2}), ("Y", {"a": 2, "b": 1, "c": 7})]
    assert top[0].score == top[1].score


def test_a_round_carries_a_share_of_the_own_score_of_the_candidate_before_it():
    """B follows A, D follows B (its carry is B's own score, not B's carried one); E's previous
    round is no candidate, so E keeps its own score."""
    scores = {"A": 1 / 61, "B": 1 / 66, "C": 1 / 62, "D": 1 / 70, "E": 1 / 63}
    fused = rrf({"dense": [hit(rid.lower(), rid, seq, 1.0) for seq, rid in enumerate("ACEBD")]}, kappa=60)
    for f in fused:  # put the hand-picked scores in place of the ranks' own
        f.score = scores[f.id]
    out = carry_forward(fused, {"B": "A", "D": "B", "E": "Z"}, dict.fromkeys("BDE", 0.05))
    expected = {"A": 1 / 61, "B": 1 / 66 + 0.05 / 61, "C": 1 / 62, "D": 1 / 70 + 0.05 / 66, "E": 1 / 63}
    assert [f.id for f in out] == sorted(expected, key=lambda r: -expected[r]) == ["A", "C", "B", "E", "D"]
    assert all(abs(f.score - expected[f.id]) < 1e-15 for f in out)
    assert {f.id: f.follows for f in out} == {"A": None, "B": "A", "C": None, "D": "B", "E": None}


def test_a_carried_score_never_lifts_a_round_past_the_round_it_carries_from():
    """D, below C, would pass it with C's share and the 1st: it ties C and ranks right after it (seq
    breaks the tie). E is above the round it follows already, so it keeps its whole carry."""
    scores = {"A": 1 / 61, "C": 1 / 62, "D": 1 / 67, "F": 1 / 64, "E": 1 / 63}
    fused = rrf({"dense": [hit(rid.lower(), rid, seq, 1.0) for seq, rid in enumerate("ACDFE")]}, kappa=60)
    for f in fused:
        f.score = scores[f.id]
    out = carry_forward(fused, {"D": "C", "E": "F"}, dict.fromkeys("DE", 0.2))
    expected = {"A": 1 / 61, "C": 1 / 62, "D": 1 / 62, "F": 1 / 64, "E": 1 / 63 + 0.2 / 64}
    assert 1 / 67 + 0.2 / 62 > 1 / 61, "uncapped, D would rank first"
    assert [f.id for f in out] == ["E", "A", "C", "D", "F"]
    assert all(abs(f.score - expected[f.id]) < 1e-15 for f in out)
    assert {f.id: f.follows for f in out} == {"A": None, "C": None, "D": "C", "F": None, "E": "F"}


def test_a_photo_round_tied_with_the_round_it_follows_stays_after_it():
    """Ranks (1, 2) and (2, 1) tie exactly; the earlier round ranks first, and the carry must not undo that."""
    fused = rrf({"dense": [hit("a", "A", 1, 0.9), hit("b", "B", 2, 0.8)], "bm25": [hit("b", "B", 2, 9.0), hit("a", "A", 1, 8.0)]},
                kappa=60)
    assert fused[0].score == fused[1].score
    out = carry_forward(fused, {"B": "A"}, {"B": 0.1})
    assert [(f.id, f.follows) for f in out] == [("A", None), ("B", "A")] and out[1].score == out[0].score


def test_no_weight_leaves_the_fused_ranking_as_it_is():
    fused = rrf({"dense": [hit("a", "A", 1, 0.9), hit("b", "B", 2, 0.8), hit("c", "C", 3, 0.7)]}, kappa=60)
    before = [(f.id, f.score) for f in fused]
    out = carry_forward(fused, {"C": "B", "B": "A"}, {"C": 0.0, "B": 0.0})
    assert [(f.id, f.score) for f in out] == before and all(f.follows is None for f in out)


def test_llamaindex_query_fusion_merges_a_round_found_by_several_queries(make_index, scripted_llm):
    """``QueryFusionRetriever`` merges nodes by ``hash``: the per-query explanation in
    ``metadata["vmem"]`` must not make the same stored round a different node for each query."""
    import pickle

    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.schema import MetadataMode, TextNode

    index = make_index()
    index.add_rounds([{"user": u, "assistant": "Noted.", "session_id": "D1"} for u in (
        "My cat is called Mochi, a tabby.", "I moved to Lisbon last spring.", "My favourite food is ramen.")])
    first, second = "cat Mochi tabby or Lisbon spring", "ramen food or Lisbon spring"
    retriever = index.as_retriever(k=3)
    ranks = [{n.node.node_id: rank for rank, n in enumerate(retriever.retrieve(q))} for q in (first, second)]
    fusion = QueryFusionRetriever([retriever], llm=scripted_llm(default=second), num_queries=2,
                                  mode="reciprocal_rerank", similarity_top_k=10)
    fused = fusion.retrieve(first)
    assert len(fused) == 3 and len({n.node.node_id for n in fused}) == 3
    for n in fused:
        assert abs(n.score - sum(1 / (60 + r[n.node.node_id]) for r in ranks)) < 1e-12
    node = fused[0].node
    assert node.metadata["vmem"]["case"] == "text->text", "the explanation stays with the node"
    stored = TextNode(text=node.text, metadata={k: v for k, v in node.metadata.items() if k != "vmem"})
    assert node.hash == stored.hash
    for mode in (MetadataMode.LLM, MetadataMode.EMBED):
        assert node.get_content(mode) == node.text
    assert pickle.loads(pickle.dumps(fused[0])).node.metadata == node.metadata
    assert TextNode.from_json(node.to_json()).metadata == node.metadata


def test_a_hyde_bundle_is_searched_densely_by_its_embedding_strings_as_the_stock_vector_retriever_does(make_index, scripted_llm):
    """LlamaIndex's HyDE keeps the question as ``query_str`` and puts a hypothetical answer in
    ``custom_embedding_strs``; its ``VectorIndexRetriever`` embeds those. V-Mem's dense search with
    the question must too, or HyDE silently changes nothing; BM25 stays on the question's words. A
    precomputed ``embedding`` is another retriever's (a stock one run first on the same bundle writes
    its own model's vector there), so it is not used."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.indices.query.query_transform import HyDEQueryTransform
    from llama_index.core.retrievers import TransformRetriever
    from llama_index.core.schema import QueryBundle, TextNode

    index = make_index()
    said = ["My cat is called Mochi, a tabby.", "I moved to Lisbon last spring.", "My sister Ingrid lives in Bergen.",
            "I bought a red bike yesterday.", "My favourite food is ramen."]
    index.add_rounds([{"user": u, "assistant": "Noted.", "session_id": "D1"} for u in said])
    question, hypothetical = "Which city did I move to?", "My favourite food is ramen, I eat it every day."
    hyde = HyDEQueryTransform(llm=scripted_llm(default=hypothetical))
    retriever = index.as_retriever(k=len(said))
    stock = VectorStoreIndex([TextNode(text=f"User: {u}\nAssistant: Noted.") for u in said],
                             embed_model=index.embed_model).as_retriever(similarity_top_k=1)

    def ranks(nodes, signal):
        return {n.node.text: n.node.metadata["vmem"]["ranks"].get(signal) for n in nodes}

    def dense_top(nodes):
        return next(text for text, rank in ranks(nodes, "text_dense").items() if rank == 1)

    plain = retriever.retrieve(question)
    with_hyde = TransformRetriever(retriever, hyde).retrieve(question)
    assert dense_top(plain) == stock.retrieve(question)[0].node.text == "User: I moved to Lisbon last spring.\nAssistant: Noted."
    assert dense_top(with_hyde) == TransformRetriever(stock, hyde).retrieve(question)[0].node.text
    assert dense_top(with_hyde) == "User: My favourite food is ramen.\nAssistant: Noted."
    assert ranks(with_hyde, "text_bm25") == ranks(plain, "text_bm25"), "BM25 searches with the question"
    assert ranks(retriever.retrieve(QueryBundle(question, custom_embedding_strs=[question])), "text_dense") == ranks(plain, "text_dense")
    other_models = QueryBundle(question, embedding=[0.5, 0.5, 0.5])
    assert ranks(retriever.retrieve(other_models), "text_dense") == ranks(plain, "text_dense")


def test_a_returned_round_names_every_unit_a_signal_found_best_first(make_index):
    """``pool_units`` says which parts of a round matched (any signal's candidates) and by which
    signals, not only each signal's best unit (``matched_units``): a caller that shows or scores
    finer than rounds reads it."""
    index = make_index()
    index.add_rounds([{"user": "I adopted a cat called Mochi.", "assistant": "Mochi is a lovely name for a cat.",
                       "session_id": "D1"},
                      {"user": "I moved to Lisbon.", "assistant": "Lisbon is sunny.", "session_id": "D1"}])
    top = index.as_retriever(k=1).retrieve("cat Mochi")[0].node.metadata["vmem"]
    roles = [u["role"] for u in top["pool_units"]]
    assert sorted(roles) == ["assistant", "user"], "both spans of the round were candidates"
    assert set(top["matched_units"].values()) <= {u["unit"] for u in top["pool_units"]}
    assert top["pool_units"][0]["unit"] in top["matched_units"].values(), "best first"
    assert all(u["image_id"] is None for u in top["pool_units"])
    for signal, unit in top["matched_units"].items():
        assert signal in next(u["signals"] for u in top["pool_units"] if u["unit"] == unit)
    assert all(set(u["signals"]) <= set(top["ranks"]) for u in top["pool_units"])


def test_a_round_carries_from_the_best_of_the_rounds_its_links_reach():
    """E links back through D, C, B to A. Reaching 3, E carries from the best of D, C, B (B); reaching
    1, from D alone. A walk stops at a round that is no candidate (Z)."""
    fused = rrf({"dense": [hit(r.lower(), r, seq, 1.0) for seq, r in enumerate("ABCDEF")]}, kappa=60)
    for f, score in zip(fused, (0.5, 0.4, 0.1, 0.2, 0.05, 0.3)):
        f.score = score
    links = {"B": "A", "C": "B", "D": "C", "E": "D", "F": "Z"}
    assert best_before(fused, links, ["E"], 3) == {"E": "B"}
    assert best_before(fused, links, ["E"], 4) == {"E": "A"}
    assert best_before(fused, links, ["E", "C"], 1) == {"E": "D", "C": "B"}
    assert best_before(fused, {"E": "D", "D": "Z"}, ["E"], 3) == {"E": "D"}


def test_a_walk_back_follows_the_links_nearest_first_up_to_its_reach():
    links = {"B": "A", "C": "B", "D": "C"}
    assert walk_back(links, "D", 2) == ["C", "B"]
    assert walk_back(links, "D", 5) == ["C", "B", "A"], "it ends at a round with no link"
    assert walk_back(links, "A", 3) == [] and walk_back(links, "D", 0) == []


def test_a_round_opening_its_session_looks_back_to_the_session_held_last_before_it():
    def round_(session: str, seq: int, prev: str | None = None) -> dict:
        return {schema.SESSION_ID: session, schema.SEQ: seq, schema.PREV_ROUND_ID: prev}

    found = {"A1": round_("A", 1), "A2": round_("A", 2, "A1"), "B1": round_("B", 3), "B2": round_("B", 4, "B1"),
             "C1": round_("C", 9)}
    assert sessions_before(found) == {"B1": ["A1", "A2"], "C1": ["B1", "B2"]}
    assert sessions_before({k: found[k] for k in ("A2", "C1")}) == {"C1": ["A2"]}, "the last session among the candidates"
    assert sessions_before({k: found[k] for k in ("A1", "A2", "B2")}) == {}, "B2 follows a round of its own session"


def test_one_more_ranking_adds_reciprocal_ranks_in_present_order():
    fused = rrf({"dense": [hit(r.lower(), r, seq, 1.0) for seq, r in enumerate("ABC")]}, kappa=60)
    out = add_ranking(fused, "holds", {"C", "B"}, kappa=60)
    assert [f.id for f in out] == ["B", "C", "A"]
    assert {f.id: f.ranks.get("holds") for f in out} == {"A": None, "B": 1, "C": 2}
    assert abs(out[0].score - (1 / 62 + 1 / 61)) < 1e-15 and abs(out[1].score - (1 / 63 + 1 / 62)) < 1e-15
