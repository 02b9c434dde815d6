"""The four routing cases, each on a hand-built conversation where raw similarity search fails
(the failure cases of the paper's Figure 1 / Appendix K), with real MiniLM and a tiny real SigLIP.

"Raw similarity search" is LlamaIndex's stock ``VectorStoreIndex`` over the same unit texts with
the same MiniLM: each test first shows it misses, then that V-Mem's route finds the round.
"""

from __future__ import annotations


from llama_index.core import VectorStoreIndex
from llama_index.core.schema import ImageNode, TextNode
from PIL import Image

from llama_index_vmem import Case, VMemQueryBundle
from llama_index_vmem.router import Anchor
from llama_index_vmem.retriever import EXPLAIN_KEY

FILLER = [
    ("Any tips for a first marathon?", "Build mileage slowly and taper the last two weeks."),
    ("I keep forgetting to water things.", "A weekly reminder on your phone helps."),
    ("Which entrepreneur do you admire most? I read biographies of entrepreneurs every month.",
     "Many people admire entrepreneurs who started from nothing; biographies are full of them."),
    ("My friends and I play board games every Friday with my friends from work.", "Friends and games, a great combination."),
    ("What breed of dog is best for apartments?", "Small breeds like the French Bulldog adapt well to apartments."),
]


def _stock_top_round(rounds, question, minilm):
    """Top round of a stock dense search over the same unit texts (user, assistant, captions)."""
    nodes = []
    for r in rounds:
        for text in [r["user"], r["assistant"], *[i.get("caption", "") for i in r.get("images", [])]]:
            if text:
                nodes.append(TextNode(text=text, metadata={"round_key": r["round_key"]}, excluded_embed_metadata_keys=["round_key"]))
    hits = VectorStoreIndex(nodes, embed_model=minilm).as_retriever(similarity_top_k=1).retrieve(question)
    return hits[0].node.metadata["round_key"]


def _round(key, user, assistant, images=()):
    return {"round_key": key, "user": user, "assistant": assistant, "images": list(images), "session_id": key.split(":")[0]}


def _filler(session):
    return [_round(f"{session}:{i + 1}", u, a) for i, (u, a) in enumerate(FILLER)]


def _top_round(nodes):
    return next(n.node.metadata["round_key"] for n in nodes if not isinstance(n.node, ImageNode))


def test_text_to_text_routes_to_text_lane_only(make_index, minilm):
    rounds = _filler("D1") + [_round("D2:1", "I finally booked the trip to Kyoto for April.", "Cherry blossoms will be out then.")]
    index = make_index()
    index.add_rounds(rounds)
    result = index.as_retriever().retrieve_with_plan(VMemQueryBundle("When is my Kyoto trip?"))
    assert result.plan.case is Case.TEXT_TO_TEXT
    assert {s.name for s in result.plan.signals} == {"text_dense", "text_bm25", "text_context_bm25"}
    assert _top_round(result.nodes) == "D2:1"
    assert not any(isinstance(n.node, ImageNode) for n in result.nodes)


def test_image_text_to_text_matches_through_the_shared_round(make_index, minilm, photos):
    """Case 1: the query photo matches a stored photo whose round names the breed; text search can't."""
    rounds = _filler("D1") + [
        _round("D2:1", "Sharing a picture from this afternoon.", "What a relaxed little one! Your Bengal cat Mochi looks happy.",
               [{"image_id": "D2:IMG_001", "path": str(photos["chelsea"])}]),
        _round("D2:2", "Here is my coffee this morning.", "Looks delicious.",
               [{"image_id": "D2:IMG_002", "path": str(photos["coffee"])}]),
    ]
    question = "What breed is the animal in this picture?"
    assert _stock_top_round(rounds, question, minilm) != "D2:1"
    index = make_index()
    index.add_rounds(rounds)
    result = index.as_retriever().retrieve_with_plan(VMemQueryBundle(question, image_path=str(photos["chelsea"])))
    assert result.plan.case is Case.IMAGE_TEXT_TO_TEXT
    assert _top_round(result.nodes) == "D2:1"
    assert result.nodes[0].node.metadata[EXPLAIN_KEY]["ranks"]["visual"] == 1


def test_text_to_image_hypo_caption_finds_the_image(make_index, minilm, photos, scripted_llm):
    """Case 2: 'friends' is in no caption; the drafted caption is, and the right image wins."""
    rounds = _filler("D1") + [
        _round("D2:1", "Last night was so much fun.", "Looks like a memorable evening!",
               [{"image_id": "D2:IMG_001", "path": str(photos["astronaut"]), "caption": "Four people laughing together around a campfire at night under the stars"}]),
        _round("D2:2", "Dinner tonight.", "Yum.",
               [{"image_id": "D2:IMG_002", "path": str(photos["coffee"]), "caption": "A bowl of ramen with egg and scallions on a wooden table"}]),
        _round("D2:3", "View from the office.", "Great skyline.",
               [{"image_id": "D2:IMG_003", "path": str(photos["rocket"]), "caption": "A city skyline of glass towers at sunset"}]),
    ]
    question = "Which picture shown in the conversation is about friends?"
    assert _stock_top_round(rounds, question, minilm) != "D2:1"
    index = make_index()
    index.add_rounds(rounds)

    raw = index.as_retriever().retrieve_with_plan(VMemQueryBundle(question))
    assert raw.plan.case is Case.TEXT_TO_IMAGE
    assert raw.anchors[raw.plan.signals[-1].anchor].source == "raw query (no LLM)"

    llm = scripted_llm({"ONE image": "A group of people laughing around a campfire at night, sitting together under a starry sky"})
    result = index.as_retriever(llm=llm).retrieve_with_plan(VMemQueryBundle(question))
    assert _top_round(result.nodes) == "D2:1"
    assert result.nodes[1].node.metadata["image_id"] == "D2:IMG_001"
    assert isinstance(result.nodes[1].node, ImageNode) and result.nodes[1].node.image_path
    picture = result.nodes[1].node.metadata[EXPLAIN_KEY]  # every returned node says why it came back
    assert picture["match"] == "picture of D2:1" and picture["ranks"] == result.nodes[0].node.metadata[EXPLAIN_KEY]["ranks"]
    assert f"Question: {question}" in llm.prompts[0]
    assert result.nodes[0].node.metadata[EXPLAIN_KEY]["anchors"]["hypo_caption"]["source"] == "llm"


def test_a_borrowed_picture_is_shown_with_the_round_that_owns_it(make_index, photos):
    """A round without a picture lends its neighbours' (image_filter_window). Where the owner is
    returned too, the picture follows its owner; where it is not, it follows the borrower and says
    whose it is. The horse is never shown as the satellite round's."""
    index = make_index()
    index.add_rounds([
        _round("D2:1", "We drove to the coast to watch a launch.", "Which rocket was it?",
               [{"image_id": "D2:IMG_001", "path": str(photos["rocket"]), "caption": "a rocket on a launch pad"}]),
        _round("D2:2", "A small satellite launch by a private company.", "Those are getting common now."),
        _round("D2:3", "Then I went riding at my aunt's ranch.", "What is the horse called?",
               [{"image_id": "D2:IMG_002", "path": str(photos["horse"]), "caption": "a horse silhouette on white"}]),
    ])

    def shown(k):
        out, current = [], None
        for n in index.as_retriever(k=k).retrieve("Which photo is of the private company's small satellite?"):
            if isinstance(n.node, ImageNode):
                out.append((current, n.node.metadata["image_id"], n.node.metadata[EXPLAIN_KEY]["match"]))
            else:
                current = n.node.metadata["round_key"]
        return out

    every = shown(3)
    assert sorted(every) == [("D2:1", "D2:IMG_001", "picture of D2:1"), ("D2:3", "D2:IMG_002", "picture of D2:3")], every
    alone = shown(1)  # the satellite round alone: what it borrows follows it, named by its owner
    owners = {"D2:IMG_001": "D2:1", "D2:IMG_002": "D2:3"}
    assert alone and all(r == "D2:2" and m == f"picture of {owners[i]}, next to D2:2" for r, i, m in alone), alone


def test_image_text_to_text_enriched_anchor_reaches_evidence(make_index, minilm, photos, scripted_llm):
    """Case 3: neither the question nor the photo names the entrepreneur; the image's keywords do."""
    rounds = _filler("D1") + [
        _round("D2:1", "Electric cars are finally mainstream.", "Tesla and Elon Musk pushed the whole industry there."),
        _round("D2:2", "Look at this sunset.", "Beautiful colours.", [{"image_id": "D2:IMG_001", "path": str(photos["hubble_deep_field"])}]),
    ]
    question = "When we talked about which entrepreneur did I share something related to this picture?"
    assert _stock_top_round(rounds, question, minilm) != "D2:1"
    index = make_index()
    index.add_rounds(rounds)
    llm = scripted_llm({"You can SEE": '{"keywords": ["Tesla", "electric car", "car", "Model S"]}'})
    result = index.as_retriever(llm=llm).retrieve_with_plan(VMemQueryBundle(question, image_path=str(photos["rocket"])))
    assert result.plan.case is Case.IMAGE_TEXT_TO_TEXT
    assert _top_round(result.nodes) == "D2:1"
    sent = llm.chats[0][0]
    assert [b.block_type for b in sent.blocks] == ["image", "text"]
    assert question in sent.blocks[1].text
    assert sent.blocks[1].text.endswith('Return JSON: {"keywords": ["...", "..."]}'), "as Appendix C writes it, braces single"
    assert "Tesla" in result.anchors[next(a for a in result.anchors if a.value == "enriched")].text
    junk = scripted_llm({"You can SEE": '{"keywords": ["Tesla", null, 7, {"a": 2}, "electric car", "car", "Model S"]}'})
    capped = index.as_retriever(llm=junk).retrieve_with_plan(VMemQueryBundle(question, image_path=str(photos["rocket"])),
                                                             max_anchor_keywords=2)
    assert capped.anchors[Anchor.ENRICHED].text == f"{question} Tesla electric car", "words only, as many as this query allows"


def test_an_image_asked_about_in_no_words_is_ranked_by_its_pixels_alone(make_index, photos):
    """The text signals of an empty question would rank every round at random and outvote the picture."""
    index = make_index()
    index.add_rounds(_filler("D1") + [
        _round("D2:1", "My cat again.", "Cute!", [{"image_id": "D2:IMG_001", "path": str(photos["chelsea"])}]),
        _round("D2:2", "Morning coffee.", "Enjoy.", [{"image_id": "D2:IMG_002", "path": str(photos["coffee"])}]),
    ])
    result = index.as_retriever().retrieve_with_plan(VMemQueryBundle("", image_path=str(photos["chelsea"])))
    assert result.plan.case is Case.IMAGE_TEXT_TO_TEXT
    assert _top_round(result.nodes) == "D2:1"
    assert result.nodes[0].node.metadata[EXPLAIN_KEY]["ranks"] == {"visual": 1}


def test_image_text_to_text_without_an_llm_searches_with_the_caption_keywords(make_index, minilm):
    """Case 3 offline: the attached image is known only by its caption, whose first content words
    stand in for the vision LLM's keywords, capped as those are. The keywords bring the pictured
    round to the top of the dense and reply-context lists; BM25 (without length normalisation, b=0)
    still puts the filler round that says "entrepreneur(s)" twice first."""
    rounds = _filler("D1") + [
        _round("D2:1", "Electric cars are finally mainstream.", "Tesla and Elon Musk pushed the whole industry there."),
    ]
    question = "When we talked about which entrepreneur did I share something related to this picture?"
    caption = "A red Tesla electric car charging in front of a glass office building at dusk"
    index = make_index()
    index.add_rounds(rounds)
    retriever = index.as_retriever()

    def ranks(result):
        return {n.node.metadata["round_key"]: n.node.metadata[EXPLAIN_KEY]["ranks"] for n in result.nodes
                if not isinstance(n.node, ImageNode) and EXPLAIN_KEY in n.node.metadata}

    plain = ranks(retriever.retrieve_with_plan(VMemQueryBundle(question)))
    assert plain.get("D2:1", {}).get("text_dense", 99) > 1 and plain.get("D2:1", {}).get("text_bm25") is None

    result = retriever.retrieve_with_plan(VMemQueryBundle(question, image_caption=caption), max_anchor_keywords=3)
    assert result.plan.case is Case.IMAGE_TEXT_TO_TEXT
    anchor = result.anchors[Anchor.ENRICHED]
    assert anchor.text == f"{question} red Tesla electric"
    assert anchor.source == "raw query + attached image caption keywords (attached image has no pixels)"
    found = ranks(result)
    assert found["D2:1"] == {"text_dense": 1, "text_bm25": 2, "text_context_bm25": 1} and list(found)[0] == "D2:1"


def test_image_text_to_image_uses_the_image_lane_alone(make_index, minilm, photos, tmp_path):
    """Case 4: the question's words match other rounds; only the pixels identify the photo."""
    rounds = _filler("D1") + [
        _round("D2:1", "This is the same photo I showed you of our trip, which picture was it again?", "The photo of the trip.",
               [{"image_id": "D2:IMG_001", "path": str(photos["coffee"])}]),
        _round("D2:2", "Weekend hike.", "Nice.", [{"image_id": "D2:IMG_002", "path": str(photos["horse"])}]),
        _round("D2:3", "Old camera shot.", "Classic.", [{"image_id": "D2:IMG_003", "path": str(photos["camera"])}]),
    ]
    question = "Which picture in our chat is the same as this photo?"
    assert _stock_top_round(rounds, question, minilm) != "D2:2"
    index = make_index()
    index.add_rounds(rounds)
    query_image = tmp_path / "horse-small.png"
    Image.open(photos["horse"]).convert("RGB").resize((200, 160)).save(query_image)
    result = index.as_retriever().retrieve_with_plan(VMemQueryBundle(question, image_path=str(query_image)))
    assert result.plan.case is Case.IMAGE_TEXT_TO_IMAGE
    assert [s.name for s in result.plan.signals] == ["visual"]
    assert _top_round(result.nodes) == "D2:2"
    assert result.nodes[1].node.metadata["image_id"] == "D2:IMG_002"


def test_image_round_filter_keeps_rounds_next_to_images(make_index, photos):
    """Text->image: a text-only round far from any image is filtered out; one next to an image stays."""
    rounds = [
        _round("D1:1", "The red bicycle I restored is finished!", "Congratulations on the red bicycle."),
        _round("D1:2", "Filler about cooking pasta.", "Salt the water."),
        _round("D1:3", "Filler about the weather.", "Rainy again."),
        _round("D1:4", "Here it is.", "Lovely.", [{"image_id": "D1:IMG_001", "path": str(photos["coffee"]), "caption": "A bike leaning on a wall"}]),
        _round("D1:5", "And the red bicycle from the side.", "The red bicycle shines."),
    ]
    index = make_index()
    index.add_rounds(rounds)
    result = index.as_retriever().retrieve_with_plan(VMemQueryBundle("Which photo shows the red bicycle?"))
    keys = [n.node.metadata["round_key"] for n in result.nodes if not isinstance(n.node, ImageNode)]
    assert "D1:1" not in keys and "D1:5" in keys and "D1:4" in keys
    assert not result.filter_fallback
    # D1:5 holds no image itself: it brings its neighbour's, which follows the round it was shared in.
    d14 = next(i for i, n in enumerate(result.nodes) if n.node.metadata.get("round_key") == "D1:4" and not isinstance(n.node, ImageNode))
    picture = result.nodes[d14 + 1].node
    assert picture.metadata["image_id"] == "D1:IMG_001" and picture.metadata[EXPLAIN_KEY]["match"] == "picture of D1:4"


RED_BICYCLE = ("The red bicycle I restored is finished!", "Congratulations on the red bicycle.")
PASTA = ("Filler about cooking pasta.", "Salt the water.")
WEATHER = ("Filler about the weather.", "Rainy again.")


def _bike_photo(photos, image_id):
    return [{"image_id": image_id, "path": str(photos["coffee"]), "caption": "A bike leaning on a wall"}]


def _ask_for_the_bicycle(index):
    """Ask a text->image question; return the round keys, and the image ids each round came back with."""
    result = index.as_retriever().retrieve_with_plan(VMemQueryBundle("Which photo shows the red bicycle?"))
    keys, images, current = [], {}, None
    for n in result.nodes:
        if isinstance(n.node, ImageNode):
            images.setdefault(current, []).append(n.node.metadata["image_id"])
        else:
            current = n.node.metadata["round_key"]
            keys.append(current)
    assert not result.filter_fallback
    return keys, images


def test_image_round_filter_stops_at_the_session_edge(make_index, photos):
    """The last round of one session is not next to the first of the next: another day's
    conversation. It is filtered out, and borrows no image from there."""
    index = make_index()
    index.add_rounds([_round("D1:1", *PASTA), _round("D1:2", *RED_BICYCLE),
                      _round("D2:1", "Here it is.", "Lovely.", _bike_photo(photos, "D2:IMG_001")), _round("D2:2", *WEATHER)])
    keys, images = _ask_for_the_bicycle(index)
    assert "D1:2" not in keys and set(keys) == {"D2:1", "D2:2"}
    assert images == {"D2:1": ["D2:IMG_001"]}  # both rounds return it: it is listed once, after its own round


def test_image_round_filter_reaches_across_a_forgotten_round(make_index, photos):
    """After a forget, the rounds either side of the gap are neighbours (the context joins them):
    the filter and the images a round borrows follow the same links, not the old positions."""
    index = make_index()
    index.add_rounds([_round("D1:1", *RED_BICYCLE), _round("D1:2", *PASTA),
                      _round("D1:3", "Here it is.", "Lovely.", _bike_photo(photos, "D1:IMG_001")), _round("D1:4", *WEATHER),
                      _round("D1:5", "Filler about a marathon.", "Taper before it."),
                      _round("D1:6", "And the red bicycle again, from the side.", "The red bicycle shines.")])
    index.forget(["D1:2"])
    keys, images = _ask_for_the_bicycle(index)
    assert "D1:1" in keys and "D1:6" not in keys
    assert "D1:IMG_001" in [i for ids in images.values() for i in ids]
    first = next(stored.round for stored in index.rounds(["D1:1"]))
    assert [img.metadata["image_id"] for img in index.images_near([first], 1)[first.node_id]] == ["D1:IMG_001"]


def test_image_round_filter_falls_back_when_no_round_has_an_image(make_index):
    index = make_index()
    index.add_rounds([_round("D1:1", "The red bicycle is done.", "Nice."), _round("D1:2", "Pasta tonight.", "Yum.")])
    result = index.as_retriever().retrieve_with_plan(VMemQueryBundle("Which photo shows the red bicycle?"))
    assert result.filter_fallback
    assert _top_round(result.nodes) == "D1:1"


def test_counting_gate_skips_the_hypo_caption(make_index, photos, scripted_llm):
    index = make_index()
    index.add_rounds([_round("D1:1", "My dog.", "Cute.", [{"image_id": "D1:IMG_001", "path": str(photos["chelsea"]), "caption": "a dog"}])])
    llm = scripted_llm(default="a caption")
    result = index.as_retriever(llm=llm).retrieve_with_plan(VMemQueryBundle("How many pictures of dogs did I share?"))
    assert result.plan.counting and result.plan.case is Case.TEXT_TO_IMAGE
    assert llm.prompts == []
    assert {a.value for a in result.anchors} == {"query"}
    gated_off = index.as_retriever(llm=llm, hypo_caption_counting_gate=False).retrieve_with_plan(
        VMemQueryBundle("How many pictures of dogs did I share?"))
    assert "hypo_caption" in {a.value for a in gated_off.anchors} and len(llm.prompts) == 1


def test_aggregation_widens_k_and_drops_neighbours(make_index):
    index = make_index()
    index.add_rounds([_round(f"D1:{i}", f"We visited museum number {i} today.", "Sounds great.") for i in range(1, 41)])
    retriever = index.as_retriever()
    result = retriever.retrieve_with_plan(VMemQueryBundle("How many different museums have we discussed?"))
    assert result.plan.aggregation and result.plan.k == 30 and result.plan.neighbor_window == 0
    assert len(result.nodes) == 30
    engine_nodes = index.as_query_engine(llm=_echo_llm()).retrieve(VMemQueryBundle("How many different museums have we discussed?"))
    assert sum(len(n.node.metadata["rounds"]) for n in engine_nodes) == 30
    ordinary = retriever.retrieve_with_plan(VMemQueryBundle("What did we do at museum number 7?"))
    assert ordinary.plan.k == 12 and len(ordinary.nodes) == 12


def _echo_llm():
    from llama_index.core.llms import MockLLM

    return MockLLM()


def test_neighbours_merge_into_time_ordered_blocks(make_index):
    index = make_index()
    index.add_rounds([_round(f"D1:{i}", text, "ok") for i, text in enumerate(
        ["alpha topic", "beta topic", "gamma kiwi fruit", "delta topic", "epsilon kiwi fruit", "zeta", "eta", "theta", "iota", "kappa kiwi fruit"], start=1)])
    engine = index.as_query_engine(llm=_echo_llm(), k=3)
    blocks = engine.retrieve(VMemQueryBundle("kiwi fruit"))
    spans = [n.node.metadata["rounds"] for n in blocks]
    # Rounds 3 and 5 overlap through round 4: one block 2..6; round 10 gets 9..10 (no round 11).
    assert spans == [["D1:2", "D1:3", "D1:4", "D1:5", "D1:6"], ["D1:9", "D1:10"]]
    assert blocks[0].node.metadata["matched_rounds"] == ["D1:3", "D1:5"]
    assert blocks[0].node.text.startswith("[session D1, rounds D1:2 to D1:6]")
    assert blocks[0].node.text.index("beta topic") < blocks[0].node.text.index("zeta")


def test_neighbours_stay_within_the_session(make_index):
    index = make_index()
    index.add_rounds([_round("D1:1", "apples", "ok"), _round("D1:2", "kiwi fruit", "ok"),
                      _round("D2:1", "kiwi fruit again", "ok"), _round("D2:2", "pears", "ok")])
    blocks = index.as_query_engine(llm=_echo_llm(), k=2).retrieve(VMemQueryBundle("kiwi fruit"))
    assert [n.node.metadata["rounds"] for n in blocks] == [["D1:1", "D1:2"], ["D2:1", "D2:2"]]


def test_sessionless_rounds_chain_past_rounds_of_a_session_added_between_them(make_index):
    index = make_index()
    index.add_round(user="I bought a red kayak", assistant="fun")
    index.add_round(user="work meeting about budgets", assistant="ok", session_id="W1")
    index.add_round(user="I named it Paddles", assistant="cute")
    blocks = index.as_query_engine(llm=_echo_llm(), k=1).retrieve(VMemQueryBundle("What did I name it, Paddles?"))
    assert [n.node.metadata["rounds"] for n in blocks] == [["R1", "R3"]]


def test_unit_level_ablation_returns_bare_units_spanning_k_rounds(make_index):
    index = make_index()
    index.add_rounds([_round("D1:1", "kiwi", "kiwi!"), _round("D1:2", "I had a kiwi with lunch", "nice"),
                      _round("D1:3", "a salad of kiwi, mango and mint leaves", "fresh")]
                     + [_round(f"D1:{i}", f"topic {i}", "ok") for i in range(4, 8)])
    result = index.as_retriever(round_level=False, k=2).retrieve_with_plan(VMemQueryBundle("kiwi"))
    rounds = [n.node.metadata["round_key"] for n in result.nodes]
    assert sorted(rounds) == ["D1:1", "D1:1", "D1:2"]  # k counts rounds: both spans of D1:1 come back
    assert all("kiwi" in n.node.text and n.node.metadata["role"] in ("user", "assistant") for n in result.nodes)
    assert "unit_ids" not in result.nodes[0].node.metadata


def test_a_photo_shared_a_round_after_the_one_naming_it_is_ranked_through_that_round(make_index):
    """The flowers are described in D2:1; the round holding their photo and name (D2:2) says only
    "here it is", so by Eq. 5 alone five rounds about other flowers outrank it. Carrying a share of
    D2:1's score lifts it into the top five. D2:3 holds no image and D3:1 opens another session,
    so neither carries anything. (The memory is built without reply contexts, which would find
    D2:2 by D2:1's words too, and searched without answer kinds, by which "did I find" asks for an
    outcome that "Here it is!" holds: the carry is measured alone.)"""
    flowers = [_round("D1:1", "I bought tulips for my mother's birthday.", "Tulips are a lovely birthday flower."),
               _round("D1:2", "My roses need pruning, when should I do it?", "Prune roses in late winter."),
               _round("D1:3", "Do sunflowers grow well on a balcony?", "Dwarf sunflowers do, in a deep pot."),
               _round("D1:4", "Lavender smells wonderful in the garden.", "It attracts bees too."),
               _round("D1:5", "Which flowers bloom in autumn?", "Asters, chrysanthemums and dahlias bloom in autumn.")]
    photo = [{"image_id": "IMG_1", "caption": "a tall spike of blossoms"}]
    walk = [_round("D2:1", "On our autumn walk I spotted purple bell-shaped flowers hanging like tiny trumpets! I took a picture.",
                   "How exciting, show me!"),
            _round("D2:2", "Here it is!", "That is a foxglove.", photo),
            _round("D2:3", "The flowers on the walk were purple.", "Foxgloves often are."),
            _round("D3:1", "Here it is!", "That is a foxglove.", [dict(photo[0], image_id="IMG_2")])]
    index = make_index(reply_context=False)
    index.add_rounds(_filler("D0") + flowers + walk)
    question = VMemQueryBundle("Which purple flowers did I find on the autumn walk?")

    def ranking(weight, k):
        nodes = index.as_retriever(k=k, follow_up_weight=weight, answer_reach=0).retrieve(question)
        return {n.node.metadata["round_key"]: n for n in nodes if not isinstance(n.node, ImageNode)}

    plain, carried = ranking(0, k=5), ranking(0.25, k=5)
    assert "D2:2" not in plain and "D2:2" in carried
    assert carried["D2:2"].node.metadata[EXPLAIN_KEY]["follows"] == "D2:1"  # the round key, as every header names rounds
    assert all(n.node.metadata[EXPLAIN_KEY]["follows"] is None for n in plain.values())
    own, wide = ranking(0, k=20), ranking(0.25, k=20)
    assert abs(carried["D2:2"].score - (own["D2:2"].score + 0.25 * own["D2:1"].score)) < 1e-12
    for key in ("D2:3", "D3:1"):
        assert wide[key].node.metadata[EXPLAIN_KEY]["follows"] is None and wide[key].score == own[key].score


def test_the_photo_round_carry_costs_no_extra_read_of_the_rounds_it_returns(make_index, monkeypatch):
    """The carry reads the candidates' round payloads; the rounds returned are built from that read."""
    from llama_index_vmem.store import Collection

    index = make_index()
    index.add_rounds(_filler("D0") + [_round("D2:1", "On our walk I saw purple flowers. I took a picture.", "Show me!"),
                                      _round("D2:2", "Here it is!", "That is a foxglove.", [{"image_id": "IMG_1", "caption": "blossoms"}])])
    scroll, reads = index.store.scroll, []

    def counted(collection, scope, *args, **kwargs):
        if not scope.is_empty:  # an empty id list is answered without reaching the store
            reads.append(collection)
        return scroll(collection, scope, *args, **kwargs)

    monkeypatch.setattr(index.store, "scroll", counted)
    question = VMemQueryBundle("Which purple flowers did I see on the walk?")
    plain = index.as_retriever(follow_up_weight=0).retrieve(question)
    plain_reads, reads[:] = reads.count(Collection.ROUNDS), []
    carried = index.as_retriever(follow_up_weight=0.25).retrieve(question)
    assert reads.count(Collection.ROUNDS) == plain_reads == 1
    stored = index.get_rounds(n.node.node_id for n in carried)
    assert [(n.node.text, n.node.metadata["round_key"]) for n in carried] == \
           [(stored[n.node.node_id].text, stored[n.node.node_id].metadata["round_key"]) for n in carried]
    assert {n.node.metadata["round_key"] for n in carried} == {n.node.metadata["round_key"] for n in plain}
