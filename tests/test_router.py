"""The keyword rules and what each case fixes (no LLM, no store)."""

import re

import pytest

from llama_index_vmem import Case, KeywordRules, ModalityRouter, VMemConfig, VMemInputError, VMemQueryBundle
from llama_index_vmem.router import Anchor

ROUTER = ModalityRouter()
CONFIG = VMemConfig()


@pytest.mark.parametrize(
    "question, wants_image",
    [
        ("Which image shown in 2024-06-17 is an application of AI in education?", True),
        ("Which of the images uploaded in 2024-07-07 focus on a robotic arm?", True),
        ("How many pictures of my dog did I share?", True),
        ("Show me the photo of the campsite", True),
        ("What is the name in the picture?", False),
        ("Which city is shown in the picture?", False),
        ("Which day's conversation was about the content in the picture?", False),
        ("What did I say about the job market?", False),
    ],
)
def test_target_modality_keyword_rule(question, wants_image):
    assert ROUTER.target_is_image(question) is wants_image


def test_four_cases_fix_lanes_and_anchors():
    plans = {
        q: ROUTER.route(VMemQueryBundle(q, image_path=img), CONFIG)
        for q, img in [("What did I cook?", None), ("Which photo shows the cake?", None),
                       ("What breed is this?", "x.png"), ("Which picture is this?", "x.png")]
    }
    cases = [p.case for p in plans.values()]
    assert cases == [Case.TEXT_TO_TEXT, Case.TEXT_TO_IMAGE, Case.IMAGE_TEXT_TO_TEXT, Case.IMAGE_TEXT_TO_IMAGE]
    signals = [[(s.name, s.anchor) for s in p.signals] for p in plans.values()]
    text = ["text_dense", "text_bm25", "text_context_bm25"]
    assert signals[0] == [(name, Anchor.QUERY) for name in text]
    assert signals[1] == [(name, Anchor.QUERY) for name in text[:2]] + [("caption_dense", Anchor.HYPO_CAPTION),
                                                                        ("caption_bm25", Anchor.HYPO_CAPTION)]
    assert signals[2] == [("visual", Anchor.QUERY_IMAGE)] + [(name, Anchor.ENRICHED) for name in text]
    assert signals[3] == [("visual", Anchor.QUERY_IMAGE)]
    image_filters = [p.image_filter_window for p in plans.values()]
    assert image_filters == [None, 1, None, 1]


def test_caption_only_query_image_is_matched_by_caption_not_a_fake_visual_vector():
    plan = ROUTER.route(VMemQueryBundle("Which picture is this?", image_caption="a red bike"), CONFIG)
    assert plan.case is Case.IMAGE_TEXT_TO_IMAGE
    assert {s.name for s in plan.signals} == {"visual_by_caption_dense", "visual_by_caption_bm25"}
    assert all(s.anchor is Anchor.QUERY_IMAGE_CAPTION for s in plan.signals)


def test_only_a_questions_own_pixels_break_ties():
    assert ROUTER.route(VMemQueryBundle("Seen this before?", image_path="x.png"), CONFIG).tie_break == "visual"
    assert ROUTER.route(VMemQueryBundle("Which picture is this?", image_path="x.png"), CONFIG).tie_break == "visual"
    assert ROUTER.route(VMemQueryBundle("Seen this before?", image_caption="a red bike"), CONFIG).tie_break is None
    assert ROUTER.route(VMemQueryBundle("What did I cook?"), CONFIG).tie_break is None


def test_counting_gate_and_aggregation_and_conflict():
    counting = ROUTER.route(VMemQueryBundle("How many photos of cakes did I send?"), CONFIG)
    assert counting.counting and all(s.anchor is Anchor.QUERY for s in counting.signals)
    assert counting.aggregation and counting.k == 30 and counting.neighbor_window == 0
    for q in ["How many different museums have we discussed?", "List the books I mentioned",
              "In what ways did Caroline help?", "What activities has Melanie done?", "What books has Melanie read?"]:
        plan = ROUTER.route(VMemQueryBundle(q), CONFIG)
        assert plan.aggregation and plan.k == 30 and plan.neighbor_window == 0, q
    ordinary = ROUTER.route(VMemQueryBundle("What did Melanie read last week?"), CONFIG)
    assert not ordinary.aggregation and ordinary.k == 12 and ordinary.neighbor_window == 1
    assert ROUTER.route(VMemQueryBundle("Is there a contradiction in what Julian said?"), CONFIG).answer_prompt == "conflict"
    assert ordinary.answer_prompt == "answer"


def test_config_overrides_and_rules_are_replaceable():
    plan = ROUTER.route(VMemQueryBundle("How many museums?"), CONFIG.override(aggregation_k=50, aggregation_enabled=None))
    assert plan.k == 50
    assert not ROUTER.route(VMemQueryBundle("How many museums?"), CONFIG.override(aggregation_enabled=False)).aggregation
    with pytest.raises(TypeError, match="unknown"):
        CONFIG.override(kappa=3)
    custom = ModalityRouter(KeywordRules(show_image=re.compile(r"\bdisplay\b")))
    assert custom.target_is_image("display my holiday") and not ROUTER.target_is_image("display my holiday")


def test_ablation_switches():
    vanilla = ROUTER.route(VMemQueryBundle("Which photo shows the cake?", image_caption="a cake"), CONFIG.override(routing=False))
    assert {s.name for s in vanilla.signals} == {"text_dense", "text_bm25", "text_context_bm25", "caption_dense", "caption_bm25",
                                                 "visual_by_caption_dense", "visual_by_caption_bm25"}
    assert all(s.anchor in (Anchor.QUERY, Anchor.QUERY_IMAGE_CAPTION) for s in vanilla.signals)
    assert vanilla.image_filter_window is None and not vanilla.aggregation
    units = ROUTER.route(VMemQueryBundle("What did I cook?"), CONFIG.override(round_level=False))
    assert not units.round_level and units.neighbor_window == 0
    no_anchor = ROUTER.route(VMemQueryBundle("Which photo shows the cake?"), CONFIG.override(anchors=False))
    assert {s.anchor for s in no_anchor.signals} == {Anchor.QUERY}


@pytest.mark.parametrize("question", ["Which Zürich photo did I send?", "Show me the café photo",
                                      "How many Müller pictures did I share?", "Which 3 photos did I send?",
                                      "Show me the 2023 photo"])
def test_the_words_between_a_rules_keywords_may_be_any_script_or_a_number(question):
    assert ROUTER.target_is_image(question)


def test_an_aggregation_question_widens_k_and_never_narrows_it():
    assert ROUTER.route(VMemQueryBundle("What cafés have I visited?"), CONFIG).aggregation
    assert ROUTER.route(VMemQueryBundle("How many museums?"), CONFIG.override(k=50)).k == 50


def test_only_a_text_to_text_query_at_round_level_carries_scores_into_image_rounds():
    """A query image matches the photo round itself (pixels or caption) and an image target is
    searched through its caption; a question in words for words leans on the round that named
    what the photo shows."""
    weight = {(q, img, cap): ROUTER.route(VMemQueryBundle(q, image_path=img, image_caption=cap), CONFIG).follow_up_weight
              for q, img, cap in [("What did I cook?", None, None), ("Which photo shows the cake?", None, None),
                                  ("What breed is this?", "x.png", None), ("What breed is this?", None, "a small dog"),
                                  ("Which picture is this?", "x.png", None)]}
    assert list(weight.values()) == [CONFIG.follow_up_weight, 0.0, 0.0, 0.0, 0.0]
    assert CONFIG.follow_up_weight == 0.1
    assert ROUTER.route(VMemQueryBundle("What did I cook?"), CONFIG.override(round_level=False)).follow_up_weight == 0.0
    assert ROUTER.route(VMemQueryBundle("What did I cook?"), CONFIG.override(follow_up_weight=0.5)).follow_up_weight == 0.5


def test_a_text_target_at_round_level_lets_an_answer_carry_from_the_question_before_it():
    """The answer to "What did you name her?" is words: a question for words, with or without a
    picture, lets it carry; an image target is found through its caption instead."""
    weight = {(q, img): ROUTER.route(VMemQueryBundle(q, image_path=img), CONFIG).answer_weight
              for q, img in [("What did I call my cat?", None), ("What is this animal's name?", "x.png"),
                             ("Which photo shows the cake?", None), ("Which picture is this?", "x.png")]}
    assert list(weight.values()) == [CONFIG.answer_weight, CONFIG.answer_weight, 0.0, 0.0]
    assert ROUTER.route(VMemQueryBundle("What did I call my cat?"), CONFIG.override(round_level=False)).answer_weight == 0.0
    assert ROUTER.route(VMemQueryBundle("What did I call my cat?"), CONFIG.override(answer_weight=0)).answer_weight == 0.0


@pytest.mark.parametrize("text, asks", [
    ("User: I adopted a cat!\nAssistant: What did you name her?", True),
    ('Assistant: Did she say "where is it?"  ', True),
    ("Assistant: Where did you park?)\n", True),
    ("User: I asked her why? She had no idea.", False),
    ("Assistant: Lovely name.", False),
])
def test_the_asks_rule_reads_how_a_stored_round_ends(text, asks):
    assert bool(KeywordRules().asks.search(text)) is asks


SPEAKERS = VMemConfig(user_name="Caroline Ortiz", assistant_name="Melanie")


@pytest.mark.parametrize("question, roles", [
    ("What has Melanie painted?", ("assistant",)),
    ("Where did Melanie's kids camp?", ("assistant",)),
    ("What did Caroline research?", ("user", "audio")),  # a name of several words is known by its first too
    ("What did Caroline Ortiz research?", ("user", "audio")),
    ("What did Caroline tell Melanie about the parade?", None),  # both named: whose fact is it?
    ("What did I paint last week?", None),
    ("What did melanie paint?", None),  # a name keeps its case: "Will" the user is not "will"
    ("What did Melanies paint?", None),  # whole words only
])
def test_a_question_naming_one_speaker_keeps_the_word_searches_to_their_units(question, roles):
    plan = ROUTER.route(VMemQueryBundle(question), SPEAKERS)
    assert {s.name: s.roles for s in plan.signals} == {"text_dense": None, "text_bm25": roles, "text_context_bm25": roles}
    assert any("the word searches keep to" in r for r in plan.reasons) is (roles is not None)


def test_only_a_question_for_words_keeps_to_the_speaker_it_names():
    """A picture asked for is known by what either speaker said of it and by its caption; a question
    about an attached picture asks for words."""
    pictures = ROUTER.route(VMemQueryBundle("How many photos of the beach did Melanie share?"), SPEAKERS)
    assert pictures.case is Case.TEXT_TO_IMAGE and all(s.roles is None for s in pictures.signals)
    with_photo = ROUTER.route(VMemQueryBundle("What did Melanie call this?", image_path="x.png"), SPEAKERS)
    assert [s.roles for s in with_photo.signals] == [None, None, ("assistant",), ("assistant",)]
    off = ROUTER.route(VMemQueryBundle("What has Melanie painted?"), SPEAKERS.override(routing=False))
    assert all(s.roles is None for s in off.signals)
    assert all(s.roles is None for s in ROUTER.route(VMemQueryBundle("What has Melanie painted?"), CONFIG).signals), \
        "no names given, no one is named"


def test_speaker_names_must_be_text():
    with pytest.raises(VMemInputError, match="config user_name.*must be text"):
        VMemConfig(user_name=3)
    with pytest.raises(VMemInputError, match="config assistant_name"):
        CONFIG.override(assistant_name=["Melanie"])


@pytest.mark.parametrize("question, kinds", [
    ("How much did our new sofa cost?", "a price"),
    ("What did the dentist charge for the filling?", "a price"),
    ("Which rain jacket did I choose?", "an outcome"),
    ("What cake did I end up baking?", "an outcome"),
    ("Which car did Caroline buy in the end?", "an outcome"),
    ("Where is my grandmother originally from?", "where from or a place"),
    ("Where did I find my passport?", "an outcome or a place"),  # "Got it!" or "in the flour jar"
    ("Where do I keep the spare key?", "a place"),
    ("What did the laptop repair come to?", "a price"),
    ("Which gym did I join?", "an outcome"),
    ("Which broadband provider did I switch to?", "an outcome"),
    ("Which allotment plot did I take?", "an outcome"),
    ("Who's giving the eulogy at Grandad's funeral?", "a person"),
    ("What did we name the kitten?", "a name"),
    ("What's the robot vacuum called?", "a name"),
    ("When is my half marathon?", "a time"),
    ("What day are my parents arriving?", "a time"),
    ("Why did we cancel the trip?", ""),
    ("Do you remember where I put my passport?", "a place"),
    ("Is there any instance where Julian contradicts himself?", ""),  # "where" after a noun asks for no place
    ("What did I tell you was my reason for learning Italian?", "a reply"),
    ("When you asked how far I could run, what did I say?", "a reply"),  # "when" opens a clause, not a question
    ("When's my eye test?", "a time"),
    ("Can you remind me when the plumber is coming?", "a time"),
])
def test_a_question_for_words_says_what_kinds_of_answer_it_asks_for(question, kinds):
    plan = ROUTER.route(VMemQueryBundle(question), CONFIG)
    assert " or ".join(k.name for k in plan.answer_kinds) == kinds
    assert any(r.startswith(f"asks for {kinds}:") for r in plan.reasons) is bool(kinds)


def test_only_a_question_for_words_with_the_answer_carry_on_asks_for_a_kind():
    price = "How much was the photo frame?"
    assert ROUTER.route(VMemQueryBundle(price), CONFIG).answer_kinds
    assert not ROUTER.route(VMemQueryBundle("Which photo shows the price tag?"), CONFIG).answer_kinds, "an image target"
    for off in (dict(answer_reach=0), dict(answer_weight=0), dict(round_level=False)):
        assert not ROUTER.route(VMemQueryBundle(price), CONFIG.override(**off)).answer_kinds, off


@pytest.mark.parametrize("kind, text, holds", [
    ("a price", "User: Half price in the sale, so 450 instead of 900.", True),
    ("a price", "User: It was a bargain.\nAssistant: Lovely.", False),
    ("an outcome", "User: Ok, went with the navy in the end.", True),
    ("an outcome", "User: I'm taking the second one.", True),
    ("an outcome", "User: Mostly cold, in Scotland.", False),
    ("where from", "User: She was born in Kerala and came over in 1962.", True),
    ("where from", "User: she came over from the north.", False),  # a place has a name
    ("a place", "User: They were in the fridge next to the milk.", True),
    ("a place", "User: Just the gym and the supermarket.", False),
    ("a price", "User: Fifteen hundred, non-refundable.", True),
    ("a person", "User: A guy called Dev came out this morning and fixed it.", True),
    ("a person", "User: We found a retired music teacher, Mrs Okafor, two streets away.", True),
    ("a person", "User: My dad always tried to fix boilers himself.", False),
    ("a person", "User: Yes, she said she would.\nAssistant: Great, that's settled.", False),  # openers, not names
    ("a name", "User: Biscuit. He settled on it at breakfast.", True),
    ("a name", "User: A beagle mix. Biscuit, the kids decided.", True),
    ("a name", "User: Sorted! They chose one at last.", False),
    ("a name", "User: Booked. Friday at six.", False),  # a reply's opener, not a name
    ("a name", "User: Ted. He's our new neighbour.", True),
    ("a name", "User: They're obsessed and want to give it a name.", False),
    ("a time", "User: Booked it for the 14th of September, a 6am departure.", True),
    ("a time", "User: Friday, so that's when we get the keys.", True),
    ("a time", "User: Not yet, they said they'd ring within a few weeks.", False),
    # a speaker's label after a line with no full stop is no name, and no place follows a line's last word
    ("a name", "User: we brought ours home yesterday\nAssistant: Congratulations! Have you settled on a name yet?", False),
    ("a person", "User: I'll ask around at work\nAssistant: Good idea.", False),
    ("a place", "User: the kettle keeps tripping it when I switch it on\nAssistant: Stop using it.", False),
])
def test_a_stored_round_holds_the_kind_of_answer_its_words_give(kind, text, holds):
    rule = next(k for k in KeywordRules().answer_kinds if k.name == kind)
    assert bool(rule.holds.search(text)) is holds


@pytest.mark.parametrize("text, continues", [
    ("User: Ok, went with the navy in the end.\nAssistant: Good call.", True),
    ("User: Got it! Inside pocket of the blue suitcase.", True),
    ("User: She was born in Kerala.", True),
    ("User: Chocolate it is, with sprinkles.", True),
    ("User: Ordered the mustard ones.", True),  # a verb with its subject dropped
    ("User: The bill was 95 with the medicine.", True),  # "the" points back at something known
    ("User: A guy called Dev came out and fixed it.", True),
    ("User: Gertrude. Maisie won the vote.", True),  # a bare value answers what was asked
    ("User: 14th of March! They rang her this morning.", True),
    ("User: We named the new puppy Biscuit.", False),  # what we did may open a new subject
    ("User: Finally! They've booked, landing on the 3rd.", True),
    ("User: Funny, the neighbours' girl has a hamster called Princess.", False),  # "Funny," is no name
    ("User: Launch day!\nAssistant: Wow.", False),  # a short first line may open a new subject
    ("Caroline: Yeah, I went there last week.", True),
    ("User: Sleep, honestly. I'm taking the second one.", True),
    ("User: My colleague paid 900 for a direct flight to Tokyo the same week.", False),
    ("User: What else should I pack for Iceland?", False),
    ("User: Looking for a laptop for uni, these are the three I'm considering.", False),
])
def test_the_continues_rule_reads_whether_a_stored_round_carries_on_the_one_before(text, continues):
    assert bool(KeywordRules().continues.search(text)) is continues
