"""Questions answered by a round other than the one that names their subject ("Her name is Mochi."
after "Here is my new cat!"): the retriever must return the round a person would point to, not the
round that merely shares the question's words. Real MiniLM; hand-written conversations, one memory each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

import pytest
from llama_index.core.schema import ImageNode

from llama_index_vmem import VMemIndex

#: One exchange: (user, assistant) or (user, assistant, caption of a picture the user shared,
#: given by caption only).
Exchange = Tuple[str, ...]
#: One session: (session_id, ISO date, its exchanges in order); keys are D1:1, D1:2, ... per session.
Session = Tuple[str, str, Tuple[Exchange, ...]]


@dataclass(frozen=True)
class AnswerCase:
    name: str
    kind: str
    question: str
    answer: str  # round key of the round that answers the question
    sessions: Tuple[Session, ...]


CASES: List[AnswerCase] = [
    # ---- names -------------------------------------------------------------------------------
    AnswerCase("kitten", "name", "What did we name the kitten?", "D1:2", (
        ("D1", "2024-03-02", (
            ("Look who came home with me today!", "Oh my goodness, so tiny! Have you picked a name yet?",
             "a small grey kitten asleep in a shoebox"),
            ("Pepper. My daughter chose it.", "Perfect for that little grey face."),
            ("Do kittens need special food?", "Yes, kitten formula until about a year old; it has more protein and calories."),
            ("My neighbour's cat keeps sitting on our fence and staring at the house.",
             "Cats are territorial; it's probably curious about the newcomer."),
            ("Any tips for keeping a cat off the kitchen counter?",
             "Put a tall cat tree nearby and keep the counter free of food."),
        )),
    )),
    AnswerCase("dog", "name", "What is the name of the dog we adopted?", "D1:2", (
        ("D1", "2024-05-10", (
            ("Big news: we adopted a dog from the shelter this weekend!",
             "Congratulations! What breed, and what are you going to call him?"),
            ("A beagle mix. Biscuit, the kids decided.", "Ha, that suits a beagle."),
            ("How often should a young beagle be walked?", "Twice a day, 30 to 45 minutes in total, plus some play."),
            ("My sister's dog is called Rufus and he's enormous.", "Big dogs are often gentle giants."),
            ("What do I do about dog hair on the sofa?", "A rubber glove or a lint roller picks it up well."),
            ("Work is busy, I barely had time to cook.", "Batch cooking on Sunday could help."),
        )),
    )),
    AnswerCase("coworker", "name", "What's the name of the coworker who sits next to me?", "D1:4", (
        ("D1", "2024-09-03", (
            ("I started the new job today.", "How did it go? Anyone nice on your team?"),
            ("My manager seems great, very calm.", "A calm manager makes a huge difference."),
            ("Yes, and the guy at the desk beside mine showed me around all morning.",
             "That's kind of him. Did you catch his name?"),
            ("Tomasz. He's from Gdansk, moved here two years ago.", "Nice of him to take you under his wing."),
            ("The office coffee is terrible though.", "Maybe bring a thermos from home."),
            ("My old colleague Priya texted to ask how my first day went.", "Sweet of her to check in."),
        )),
    )),
    AnswerCase("sailboat", "name", "What is our sailboat called?", "D1:2", (
        ("D1", "2024-07-20", (
            ("We finally bought her! 26 feet, second-hand.", "Congratulations! Does she have a name, or are you renaming her?",
             "a white sailboat moored at a wooden dock"),
            ("We're keeping the old one: Wandering Gull. Renaming is bad luck.",
             "Sailors are superstitious for good reason. It suits her."),
            ("My uncle's boat is a motor cruiser called Reel Time.", "Ha, a classic fishing pun."),
            ("What safety gear do we need on board?",
             "Life jackets for everyone, flares, a VHF radio, a fire extinguisher and a throwable float."),
            ("The marina fee is more than I expected.", "Slip fees add up; some clubs have cheaper moorings."),
        )),
    )),
    AnswerCase("niece", "name", "What is my niece's name?", "D2:2", (
        ("D1", "2024-02-11", (
            ("My sister had her baby last night!", "Congratulations, auntie! Boy or girl?"),
            ("A girl, 3.2 kilos. Everyone's exhausted but happy.", "Wonderful news. Have they chosen a name?"),
            ("Not yet, they're stuck between two.", "It'll come to them."),
        )),
        ("D2", "2024-02-28", (
            ("Went to visit my niece today.", "How is she doing?"),
            ("They finally settled on Elena, after my grandmother.", "What a lovely way to honour her."),
            ("My friend's baby boy is named Leo, born the same week.", "Maybe they'll be friends one day!"),
            ("I need gift ideas for a newborn.", "A personalised blanket or a set of board books."),
        )),
    )),
    AnswerCase("rescue-cat", "name", "What is my cat's name?", "D2:2", (
        ("D1", "2024-02-02", (
            ("My neighbour's cat Ziggy visits every morning.", "Sounds like you have a regular guest!"),
            ("Anyway, how do I get rid of mould in the shower?", "A bleach spray and better ventilation."),
        )),
        ("D2", "2024-03-15", (
            ("Meet the new family member!", "Adorable! Who is this?", "a black and white cat curled up on a knitted blanket"),
            ("Domino. Came from the rescue centre on Friday.", "Perfect for those markings."),
            ("What's the best cat litter?", "Clumping clay or tofu litter are popular."),
            ("My sister's cat is called Pumpkin, he's ginger.", "Fitting!"),
            ("Is it normal to hide under the bed for days?", "Yes, give her a quiet room and time to settle."),
        )),
    )),
    AnswerCase("sams-partner", "name", "What is the name of the guy Sam is dating?", "D1:2", (
        ("D1", "2024-05-25", (
            ("My best friend Sam finally introduced us to the person she's been dating.", "Exciting! What are they like?"),
            ("He's a chef, really funny. Marco, from Naples.", "A chef! Your dinner parties are about to improve."),
            ("My other friend Jess is dating a guy named Tom who I can't stand.", "That's awkward."),
            ("Sam and I are going to a concert in June.", "Who are you seeing?"),
            ("A Fleetwood Mac tribute band.", "Fun!"),
        )),
    )),
    # ---- places ------------------------------------------------------------------------------
    AnswerCase("airport-parking", "place", "Where did I park my car at the airport?", "D1:2", (
        ("D1", "2024-11-08", (
            ("At the airport, flight to Lisbon in two hours.", "Safe travels! Did you drive or get a lift?"),
            ("Drove. Left it on level 4 of the long-stay garage, row G.", "Worth a photo so you remember when you're back."),
            ("Security line is massive.", "Hopefully it moves quickly."),
            ("What's good to eat in Lisbon?", "Pasteis de nata, grilled sardines and bifana sandwiches."),
            ("My brother always parks his car in the short-stay lot and pays a fortune.",
             "Short-stay is convenient but pricey for long trips."),
            ("Boarding now!", "Enjoy the trip!"),
        )),
    )),
    AnswerCase("anniversary", "place", "Where did we go for our anniversary?", "D1:2", (
        ("D1", "2024-08-14", (
            ("Back from our anniversary weekend away.", "Welcome back! Where did you two end up?"),
            ("A little cabin on Lake Bled. We rowed out to the island church on Saturday.", "That sounds idyllic."),
            ("My parents went on a cruise to the Norwegian fjords for their anniversary last year.",
             "A cruise is a lovely way to celebrate."),
            ("I'm so behind on emails now.", "Triage by sender and deal with the urgent ones first."),
            ("Should I print some of the photos?", "A small photo book would make a nice keepsake."),
        )),
    )),
    AnswerCase("mums-birthday-dinner", "place", "Which restaurant did I book for my mum's birthday?", "D2:2", (
        ("D1", "2024-04-05", (
            ("It's my mum's 60th next month, I need to book somewhere special.", "How exciting! What food does she like?"),
            ("She loves seafood.", "Somewhere by the water would be perfect."),
        )),
        ("D2", "2024-04-20", (
            ("Done, all sorted!", "Great, where are you taking her?"),
            ("The Harbour Table down by the old pier, eight of us at 7pm.", "She'll love watching the boats."),
            ("A friend suggested a steakhouse for birthdays but mum hardly eats red meat.", "Seafood was the right call."),
            ("What should I get her as a present?", "A framed family photo, or a spa day."),
            ("I also have to book a restaurant for the team dinner next Friday.", "Any cuisine the team prefers?"),
        )),
    )),
    AnswerCase("passport", "place", "Where did I find my passport?", "D1:3", (
        ("D1", "2024-10-01", (
            ("I can't find my passport anywhere and we fly on Thursday.", "Don't panic. When did you last use it?"),
            ("Last summer in Spain, I think.", "Check travel bags and jacket pockets first."),
            ("Got it! Inside pocket of the blue suitcase.", "Phew! Maybe keep it in a document folder from now on."),
            ("My husband's passport expires in March, does that matter?",
             "Many countries want six months' validity, so check the rules."),
            ("What else should I pack for Iceland?", "Layers, a waterproof shell, and swimwear for the hot springs."),
        )),
    )),
    AnswerCase("summit", "place", "Which mountain did we climb?", "D1:2", (
        ("D1", "2024-08-25", (
            ("Summit selfie!", "Incredible view! Where is that?", "two hikers smiling on a rocky mountain summit above the clouds"),
            ("Ben Nevis, just under four hours to the top.", "That's a great time."),
            ("My cousin climbed Kilimanjaro last year.", "That's a serious expedition."),
            ("My legs are destroyed.", "Stretch, drink plenty and take a rest day."),
            ("What mountain should we do next summer?", "Snowdon or Scafell Pike would complete the Three Peaks."),
        )),
    )),
    AnswerCase("spare-key", "place", "Where did I leave the spare key for my neighbour?", "D1:2", (
        ("D1", "2024-06-22", (
            ("Going away for two weeks; my neighbour will water the plants.", "Kind of them! How will they get in?"),
            ("Under the blue flowerpot by the back door.", "Remember to tell them before you leave."),
            ("The battery in my car key died again.", "Most fobs take a CR2032; it's an easy swap."),
            ("Should I unplug everything?", "Unplug electronics, but leave the fridge on."),
            ("My neighbour across the road keeps her spare key with me too.", "Good neighbours are worth a lot."),
        )),
    )),
    # ---- prices ------------------------------------------------------------------------------
    AnswerCase("bike", "price", "How much did I pay for the bike?", "D2:2", (
        ("D1", "2024-03-16", (
            ("I'm thinking of getting a bike to commute.", "Great idea! Road bike, hybrid or e-bike?"),
            ("Probably a hybrid, something second-hand.", "Check the frame and chain carefully if you buy used."),
        )),
        ("D2", "2024-03-23", (
            ("Got the bike! A grey Trek hybrid from a guy on Marketplace.", "Nice find! What did he ask for it?",
             "a grey hybrid bicycle leaning against a brick wall"),
            ("240 in the end, he wanted 300.", "Good haggling."),
            ("My friend spent over 2000 on a carbon road bike, which seems crazy.", "Enthusiasts do spend a lot on bikes."),
            ("How much should a decent bike lock cost?", "Budget around 50 to 80 for a good D-lock."),
            ("How often should I oil the chain?", "Every few hundred kilometres, or after rain."),
        )),
    )),
    AnswerCase("tokyo-flights", "price", "How much were my flights to Tokyo?", "D1:4", (
        ("D1", "2024-01-09", (
            ("Planning a trip to Tokyo in spring.", "Lovely! Cherry blossom season is early April."),
            ("Flights look expensive though.", "Tuesday departures are often cheaper."),
            ("Booked! Return, with a stopover in Helsinki.", "Nice! What did it come to?"),
            ("612 pounds all in, including a checked bag.", "That's a good fare for April."),
            ("My colleague paid 900 for a direct flight to Tokyo the same week.", "Direct flights carry a premium."),
            ("Should I get a JR pass?", "Only if you're doing several long-distance trains."),
        )),
    )),
    AnswerCase("sofa", "price", "How much did our new sofa cost?", "D1:4", (
        ("D1", "2024-05-02", (
            ("We're replacing the old sofa, it's falling apart.", "Leather or fabric?"),
            ("Fabric, something washable with a dog in the house.", "Removable covers are worth it."),
            ("We went with a green corduroy three-seater from the outlet.", "Corduroy is having a moment. Was it a good deal?"),
            ("Half price in the sale, so 450 instead of 900.", "Great deal."),
            ("My in-laws spent 3000 on their sofa and it's uncomfortable.", "Price isn't everything with sofas."),
            ("How do I get the old one taken away?", "Many councils collect bulky waste for a small fee."),
        )),
    )),
    AnswerCase("record-player", "price", "How much did I pay for the record player?", "D1:2", (
        ("D1", "2024-12-03", (
            ("Look what I found at the flea market!", "What a find! Does it still work?",
             "a wooden 1970s record player with its lid open"),
            ("Works perfectly, and the seller let me have it for 35 euros.", "What a bargain!"),
            ("New speakers for the record player will cost about 200.", "Worth it for good sound."),
            ("My dad's old turntable sold for 400 on eBay.", "Vintage gear holds its value."),
            ("Where can I find second-hand records?", "Charity shops and record fairs."),
        )),
    )),
    # ---- choices -----------------------------------------------------------------------------
    AnswerCase("rain-jacket", "choice", "Which rain jacket did I choose?", "D1:3", (
        ("D1", "2024-06-01", (
            ("Choosing between two rain jackets: a navy one with pit zips and a lighter yellow one.",
             "Do you hike in warm rain or cold rain more?"),
            ("Mostly cold, in Scotland.", "Then warmth and venting both matter."),
            ("Ok, went with the navy in the end.", "Good call for Scottish weather."),
            ("My partner is choosing hiking boots and can't decide between leather and synthetic.",
             "Leather lasts longer; synthetic dries faster."),
            ("Which trail should we start with near Glencoe?", "The Lost Valley is a great short hike."),
        )),
    )),
    AnswerCase("car", "choice", "Which car did I buy in the end?", "D2:1", (
        ("D1", "2024-08-02", (
            ("Test drove a Mazda 3 and a Honda Civic today.", "How did they feel?"),
            ("The Mazda felt sportier, the Honda had way more space in the back.", "Think about who will ride in it."),
        )),
        ("D2", "2024-08-09", (
            ("Signed the papers this morning: the Civic. The kids need the back seat.", "Congratulations, enjoy it!"),
            ("My dad says I should have bought the Mazda.", "Everyone has an opinion on cars!"),
            ("How often does a new car need servicing?", "Usually once a year or every 10,000 miles."),
            ("The insurance quote came back high.", "Try a few comparison sites."),
        )),
    )),
    # ---- "that one" / "the second one" -------------------------------------------------------
    AnswerCase("flat", "that-one", "Which flat did I decide to rent?", "D1:3", (
        ("D1", "2024-02-19", (
            ("Viewed two flats today. First one: bright, two bedrooms, but on a busy road.", "And the second?"),
            ("Quieter, by the park, but the kitchen is tiny and it's 100 more a month.", "Tough call. What matters most to you?"),
            ("Sleep, honestly. I'm taking the second one.", "Quiet is worth a lot. Congratulations!"),
            ("My friend rented a flat right above a bar and regrets it.", "Noise is hard to live with."),
            ("What do I need to set up for utilities?", "Electricity, gas, water, internet and council tax."),
        )),
    )),
    AnswerCase("paint", "that-one", "Which paint colour did I pick for the bedroom?", "D1:2", (
        ("D1", "2024-04-12", (
            ("Painting the bedroom this weekend. Here are the samples on the wall.", "They're all calm. Which way are you leaning?",
             "three paint swatches on a white wall: sage green, dusty pink and pale grey"),
            ("The middle one, it looks warmer in the evening light.", "Warm tones are cosy for sleeping."),
            ("My neighbour painted her whole living room grey and now hates it.", "Grey can feel cold in north-facing rooms."),
            ("How many coats will I need?", "Two usually, more if you're covering a dark colour."),
            ("Do I need to tape the edges?", "Yes, painter's tape gives clean lines."),
        )),
    )),
    AnswerCase("laptop", "that-one", "Which laptop did I order?", "D1:3", (
        ("D1", "2024-11-20", (
            ("Looking for a laptop for uni. These are the three I'm considering.", "All good options. What will you use it for most?",
             "a screenshot of three laptop listings: Dell XPS 13 at 1199, Lenovo ThinkPad X1 at 1349, MacBook Air M3 at 1099"),
            ("Writing essays, and some light photo editing.", "The MacBook Air would be great for that, with long battery life."),
            ("Ok, going with that one then.", "You'll love it."),
            ("My roommate ordered a gaming laptop and it weighs a ton.", "Gaming laptops trade portability for power."),
            ("Do I need antivirus?", "The built-in protection is usually enough."),
        )),
    )),
    # ---- terse answers to the assistant's questions --------------------------------------------
    AnswerCase("half-marathon", "answer-to-question", "When is my half marathon?", "D1:3", (
        ("D1", "2024-09-15", (
            ("I want to start running again.", "Great! Do you have a goal in mind, like a race?"),
            ("A half marathon.", "Lovely goal. When is it?"),
            ("October 20th, in Cardiff.", "That gives you about five weeks, enough if you have a base."),
            ("My friend is doing the London Marathon next April.", "Quite the challenge!"),
            ("What should I eat before long runs?", "Something carb-heavy and easy to digest, like toast with banana."),
            ("My knee aches after runs sometimes.", "Ice it, and see a physio if it persists."),
        )),
    )),
    AnswerCase("allergy", "answer-to-question", "What is my father-in-law allergic to?", "D1:2", (
        ("D1", "2024-03-30", (
            ("Hosting my father-in-law for dinner on Saturday, he's visiting from Porto.",
             "How fun! Does he have any allergies I should plan the menu around?"),
            ("Shellfish, unfortunately.", "Then we'll skip the prawn starter."),
            ("And my sister-in-law is vegetarian.", "A mushroom risotto works for everyone."),
            ("My friend's son has a severe peanut allergy, so I never cook with nuts when they visit.", "Very sensible."),
            ("What wine goes with risotto?", "A dry white like a Pinot Grigio."),
        )),
    )),
    AnswerCase("wifes-birthday", "answer-to-question", "When is my wife's birthday?", "D1:2", (
        ("D1", "2024-01-20", (
            ("I want to plan something special for my wife's birthday.", "Lovely! When is it?"),
            ("The 14th of March.", "Plenty of time. What does she enjoy?"),
            ("Jazz, and Italian food.", "A jazz dinner club could be perfect."),
            ("My brother's birthday is next week and I still haven't got him anything.", "A good book or a gift card is a safe bet."),
            ("How do I wrap presents neatly?", "Let the paper overlap by a few centimetres and fold the ends into triangles."),
        )),
    )),
    AnswerCase("jumper-size", "answer-to-question", "What size jumper should I get my dad?", "D1:2", (
        ("D1", "2024-11-28", (
            ("I want to buy my dad a jumper for Christmas.", "Nice idea. What size is he?"),
            ("Large, but he likes things loose, so XL.", "A merino one in XL would be comfy."),
            ("My mum wants a cookbook.", "Ottolenghi's Simple is a great pick."),
            ("What size should I get my nephew? He's 8.", "Age 8-9, or one size up to grow into."),
            ("Shipping deadlines before Christmas?", "Usually around December 18th for standard delivery."),
        )),
    )),
    # ---- pronouns: she, it, there, he ----------------------------------------------------------
    AnswerCase("grandmother", "pronoun", "Where is my grandmother originally from?", "D1:3", (
        ("D1", "2024-06-08", (
            ("My grandmother turned 90 today!", "What a milestone! How is she celebrating?"),
            ("Lunch with the whole family. She still bakes her own lemon drizzle every year.", "That's wonderful."),
            ("She was born in Kerala and came over in 1962.", "What a life story."),
            ("My grandfather on my dad's side was from Cork.", "So you have Irish and Indian roots!"),
            ("I want to record her stories before it's too late.", "A simple voice recorder and a list of prompts would help."),
            ("What should I ask her?", "Ask about her childhood home, her first job, and how she met your grandfather."),
        )),
    )),
    AnswerCase("fig", "pronoun", "What was making my fig drop its leaves?", "D1:3", (
        ("D1", "2024-05-18", (
            ("New plant for the living room!", "Gorgeous! They can be fussy though.",
             "a tall fiddle-leaf fig in a woven basket by a window"),
            ("It's already dropping leaves.", "Usually that's overwatering or a draught. Where is it sitting?"),
            ("Right next to the radiator.", "That's the culprit. Move it somewhere bright but away from heat."),
            ("My mum's monstera has yellow leaves too.", "On a monstera that's often too much water."),
            ("How often should I water a snake plant?", "Every two to three weeks."),
        )),
    )),
    AnswerCase("porto", "pronoun", "Who are we staying with in Porto?", "D1:2", (
        ("D1", "2024-04-03", (
            ("We're spending a week in Porto in May.", "Lovely city! The riverfront is beautiful."),
            ("My cousin Ines lives there, and she insists we use her spare room for the first three nights.",
             "Having a local to show you around is the best."),
            ("After that we've booked an Airbnb in Ribeira.", "Great location, right by the river."),
            ("My boss went to Porto last year and stayed at a hotel near the cathedral.", "The Se area is lovely."),
            ("Should we take the train to Lisbon for a day?", "About three hours each way: long, but doable."),
            ("What's the food like there?", "Try a francesinha and a port tasting."),
        )),
    )),
    AnswerCase("son-university", "pronoun", "What is my son going to study at university?", "D1:2", (
        ("D1", "2024-07-01", (
            ("My son just got his exam results.", "How did he do?"),
            ("Straight As! He's off to Edinburgh to do marine biology.", "Amazing, congratulations to him."),
            ("My daughter is still deciding between law and medicine.", "Work experience can help her decide."),
            ("I'm going to miss him so much.", "It's a big change, but video calls help."),
            ("What does a student need for their first flat?", "Bedding, basic kitchenware and a good laptop."),
        )),
    )),
]


def round_dicts(case: AnswerCase) -> List[dict]:
    rounds = []
    for session_id, date, exchanges in case.sessions:
        for user, assistant, *caption in exchanges:
            round_ = {"user": user, "assistant": assistant, "session_id": session_id, "timestamp": date}
            if caption:
                round_["images"] = [{"image_id": f"{session_id}:IMG_{len(rounds) + 1}", "caption": caption[0]}]
            rounds.append(round_)
    return rounds


def round_keys(hits) -> List[str]:
    """Round keys in the order returned; picture nodes, which follow their round, are skipped."""
    return [hit.node.metadata["round_key"] for hit in hits if not isinstance(hit.node, ImageNode)]


@pytest.fixture(scope="module")
def memories(tmp_path_factory, minilm, tiny_siglip):
    """One store, one memory per case, built once for the module. BM25's IDF is computed over the
    whole store (docs/server.md), so each case's keyword scores also count the other cases' words,
    as a user's do among many users' memories; a store per case costs about 1 s more each."""
    path = tmp_path_factory.mktemp("answers") / "memory"
    opened: Dict[str, VMemIndex] = {}
    try:
        for case in CASES:
            index = VMemIndex.from_defaults(path=path, memory_id=case.name, embed_model=minilm, image_encoder=tiny_siglip)
            opened[case.name] = index
            index.add_rounds(round_dicts(case))
        yield opened
    finally:
        for index in opened.values():
            index.close()


def test_the_cases_are_well_formed():
    assert len(CASES) >= 25 and len({c.name for c in CASES}) == len(CASES)
    for case in CASES:
        keys = [f"{sid}:{i + 1}" for sid, _, exchanges in case.sessions for i in range(len(exchanges))]
        assert case.answer in keys, case.name
        assert 5 <= len(keys) <= 9, case.name


#: Share of the cases whose answering round must be in the top 2. The goal is 0.9; without an LLM the
#: retriever finds 20 of these 30 today: answers two or more rounds after the round naming their
#: subject, or in a later session, are still missed.
FLOOR = 2 / 3


def test_the_answering_round_is_in_the_top_two(memories):
    missed = []
    for case in CASES:
        keys = round_keys(memories[case.name].as_retriever(k=2).retrieve(case.question))
        if case.answer not in keys[:2]:
            missed.append(f"  [{case.kind}] {case.name}: {case.question!r} expected {case.answer}, got {keys[:2]}")
    found = len(CASES) - len(missed)
    assert found >= FLOOR * len(CASES), (
        f"answering round in the top 2 for {found}/{len(CASES)} cases (need {FLOOR:.0%}); missed:\n" + "\n".join(missed))


def test_readme_cat_question_returns_the_mochi_round(tmp_path, minilm, tiny_siglip, photos):
    index = VMemIndex.from_defaults(path=tmp_path / "memory", memory_id="alice", embed_model=minilm, image_encoder=tiny_siglip)
    try:
        index.add_rounds([
            {"user": "Here is my new cat!", "assistant": "A tabby! What's her name?",
             "images": [{"image_id": "IMG_1", "path": str(photos["chelsea"]), "caption": "a tabby cat"}],
             "session_id": "D1", "timestamp": "2024-06-17"},
            {"user": "Her name is Mochi.", "assistant": "Lovely name.",
             "session_id": "D1", "timestamp": "2024-06-17"},
            {"user": "My coffee this morning.", "assistant": "Nice latte art!",
             "images": [{"image_id": "IMG_2", "path": str(photos["coffee"]), "caption": "a cup of coffee"}],
             "session_id": "D2", "timestamp": "2024-07-02"},
        ])
        keys = round_keys(index.as_retriever(k=2).retrieve("What is my cat called?"))
        assert "D1:2" in keys[:2], f"'What is my cat called?' expected D1:2 (\"Her name is Mochi.\"), got {keys}"
    finally:
        index.close()
