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
    # ---- more choices, prices, places and people, the answer two or three rounds after the subject ----
    AnswerCase("wedding-venue", "choice", "Which venue did we pick for the wedding?", "D1:4", (
        ("D1", "2024-02-11", (
            ("We've narrowed the wedding down to two venues.", "Exciting! Which ones?"),
            ("A barn in the Cotswolds or a hotel in Bath.", "Both lovely. What's the budget like?"),
            ("The barn is cheaper but we'd need to hire caterers.", "That can add up quickly."),
            ("Right, we've decided: the hotel. Less stress for everyone.", "Sensible choice."),
            ("My brother got married in a castle, it was over the top.", "Some people love the drama."),
            ("How far ahead should we send invitations?", "About three months, and save-the-dates earlier."),
        )),
    )),
    AnswerCase("bike-price", "price", "How much did the new bike set me back?", "D1:3", (
        ("D1", "2024-03-14", (
            ("I'm finally replacing my commuter bike.", "Nice! Road bike or hybrid?"),
            ("A hybrid with disc brakes. Picked it up this afternoon.", "Great for wet mornings. Was it pricey?"),
            ("It came to 740 with the lights and lock.", "Not bad for a good setup."),
            ("My friend's carbon road bike cost over 3000.", "Carbon bikes are a different league."),
            ("How often should I oil the chain?", "Every couple of weeks, or after rides in the rain."),
        )),
    )),
    AnswerCase("keys", "place", "Where did I leave my keys?", "D1:3", (
        ("D1", "2024-04-02", (
            ("I've lost my keys again, I'm going to be late.", "Retrace your steps. Where did you go last night?"),
            ("Just the gym and the supermarket.", "Check your gym bag and coat."),
            ("Found them! They were in the fridge next to the milk.", "Ha! That happens more than you'd think."),
            ("My flatmate keeps his keys on a hook by the door.", "A hook is a good habit."),
            ("Should I get a key finder tag?", "They're cheap and work well with a phone app."),
        )),
    )),
    AnswerCase("puppy-breed", "choice", "What breed of puppy did we get in the end?", "D1:3", (
        ("D1", "2024-05-20", (
            ("We're thinking about a puppy: a labrador or a cocker spaniel.", "Both great family dogs. How much space do you have?"),
            ("A small garden and a flat-ish walk to the park.", "A cocker might suit the space better."),
            ("Ok, we went for the cocker spaniel. She's coming home on Saturday.", "How lovely, congratulations!"),
            ("My aunt has two labradors and they shed everywhere.", "Labs are famous for shedding."),
            ("What should we buy before she arrives?", "A crate, a bed, puppy food, and chew toys."),
        )),
    )),
    AnswerCase("dentist-cost", "price", "What did the dentist charge for the filling?", "D1:3", (
        ("D1", "2024-06-05", (
            ("I had a filling done at the dentist this morning.", "Ouch. How was it?"),
            ("Not too bad, the numbing worked.", "Good. Was it on the NHS or private?"),
            ("Private, unfortunately. 180 pounds.", "Private fees do vary a lot."),
            ("My partner's dentist charges 60 for a check-up.", "That's fairly typical."),
            ("How long should I wait before eating?", "Until the numbness wears off, so you don't bite your cheek."),
        )),
    )),
    AnswerCase("grandfather-origin", "place", "Where was my grandfather born?", "D1:3", (
        ("D1", "2024-07-09", (
            ("I found an old photo of my grandfather as a young man.", "What a treasure! Do you know much about him?"),
            ("A little. He worked on the railways for forty years.", "A whole career on the railways."),
            ("He was born in Naples and moved here after the war.", "What a journey."),
            ("My grandmother's family were all born locally.", "So one side stayed put."),
            ("How could I find out more about his family?", "Try archive records and the parish registers."),
        )),
    )),
    AnswerCase("phone-plan", "choice", "Which phone plan did I sign up for?", "D1:3", (
        ("D1", "2024-08-12", (
            ("My phone contract ends this month, looking at plans.", "What do you use most, data or calls?"),
            ("Data, loads of it. I stream on the train.", "Then an unlimited data plan makes sense."),
            ("Done, I went with the unlimited SIM-only one at 20 a month.", "Good value for what you use."),
            ("My mum is still on a plan from 2015 that costs a fortune.", "Worth helping her switch."),
            ("Can I keep my number?", "Yes, ask your old provider for a PAC code."),
        )),
    )),
    AnswerCase("cake", "choice", "What cake did I end up baking for the party?", "D1:3", (
        ("D1", "2024-09-01", (
            ("Baking for Sam's party tomorrow, carrot cake or chocolate?", "Does Sam have a favourite?"),
            ("He's not fussy, but half the guests are kids.", "Kids usually go for chocolate."),
            ("Chocolate it is, with sprinkles on top.", "The kids will love it."),
            ("My sister made a lemon cake for her party and nobody touched it.", "Tastes differ!"),
            ("How long will the cake keep?", "Two or three days in a tin."),
        )),
    )),
    AnswerCase("tickets-price", "price", "How much were the concert tickets?", "D1:3", (
        ("D1", "2024-10-03", (
            ("The band I love is touring in December!", "Amazing! Are you going?"),
            ("Trying to get tickets the moment they go on sale.", "Good luck, they might sell out fast."),
            ("Got two! 65 each, standing.", "Standing is the best spot for a gig."),
            ("My cousin paid 200 for resale tickets last year.", "Resale prices are brutal."),
            ("What should I bring to the gig?", "Earplugs, a small bag, and your ID."),
        )),
    )),
    AnswerCase("ring", "place", "Where did I find my wedding ring?", "D1:3", (
        ("D1", "2024-11-11", (
            ("My wedding ring has disappeared, I'm panicking.", "When did you last have it on?"),
            ("I took it off to knead bread yesterday.", "Check around the kitchen, under the mixer, in the flour."),
            ("It was in the flour jar the whole time!", "Phew! That's a relief."),
            ("My friend lost her ring on a beach and never found it.", "That's heartbreaking."),
            ("Should I get it resized so it fits tighter?", "A jeweller can do that in a week or so."),
        )),
    )),
    AnswerCase("sneakers", "choice", "Which running shoes did I buy?", "D1:3", (
        ("D1", "2024-03-03", (
            ("Trying on running shoes: Brooks Ghost versus Asics Nimbus.", "How do they feel on the treadmill?"),
            ("The Asics are softer, the Brooks feel more stable.", "Stability matters if your ankles roll."),
            ("I've gone with the Brooks, my ankles thank me already.", "Good decision."),
            ("My running club friend swears by Hoka.", "Hokas have a loyal following."),
            ("How long do running shoes last?", "Roughly 500 to 800 kilometres."),
        )),
    )),
    AnswerCase("hotel-night", "price", "How much did the hotel in Edinburgh cost per night?", "D1:3", (
        ("D1", "2024-04-14", (
            ("Booking a hotel in Edinburgh for the festival.", "August gets busy! Old Town or New Town?"),
            ("Old Town, close to the Royal Mile.", "You'll be right in the middle of it."),
            ("Sorted, 210 a night, breakfast included.", "Festival prices, but that's fair."),
            ("My colleague stayed in a hotel in Glasgow for 90 a night.", "Glasgow is cheaper for sure."),
            ("Is it walkable from the station?", "Yes, Waverley is a few minutes away."),
        )),
    )),
    AnswerCase("charger", "place", "Where was my laptop charger?", "D1:3", (
        ("D1", "2024-05-08", (
            ("Can't find my laptop charger and the battery is at 5%.", "Did you take it anywhere recently?"),
            ("To the library on Monday.", "Maybe call them, or check your backpack."),
            ("Sorted, it was under the sofa cushions.", "Classic hiding spot."),
            ("My brother's charger frayed and nearly caught fire.", "Replace damaged cables straight away."),
            ("Should I buy a spare charger?", "A spare for your bag is handy."),
        )),
    )),
    AnswerCase("holiday-choice", "choice", "Where did we decide to go on holiday?", "D1:4", (
        ("D1", "2024-01-20", (
            ("We need to book a summer holiday, any ideas?", "Beach, city or mountains?"),
            ("Beach. Thinking Crete or the Algarve.", "Both sunny in July."),
            ("Crete has more to see, the Algarve is cheaper to fly to.", "What matters more to you?"),
            ("We'll do Crete. Ancient ruins and beaches for the kids.", "Great choice for families."),
            ("My neighbours went to the Algarve and loved the golf.", "It is a golfing hotspot."),
            ("Do we need travel insurance?", "Yes, always worth having."),
        )),
    )),
    AnswerCase("vet-bill", "price", "What was the vet bill for the cat?", "D1:3", (
        ("D1", "2024-06-22", (
            ("Took the cat to the vet, she's been limping.", "Poor thing. What did they say?"),
            ("A sprain, nothing broken. Rest and painkillers.", "That's a relief."),
            ("The bill was 95 with the medicine.", "Pet care adds up."),
            ("My friend's dog needed surgery that cost 2000.", "Pet insurance helps with those."),
            ("How do I get her to take the pills?", "Hide them in a little soft food."),
        )),
    )),
    AnswerCase("plumber", "person", "Who fixed our boiler?", "D1:3", (
        ("D1", "2024-11-02", (
            ("The boiler broke down last night, no hot water.", "Oh no. Have you called anyone?"),
            ("Called three plumbers, none free until next week.", "Try a local emergency service."),
            ("A guy called Dev came out this morning and fixed it in an hour.", "Brilliant, hang on to his number."),
            ("My dad always tried to fix boilers himself.", "Not recommended with gas!"),
            ("Should we get it serviced every year?", "Yes, annual servicing is recommended."),
        )),
    )),
    AnswerCase("curtains", "choice", "What colour did I choose for the curtains?", "D1:3", (
        ("D1", "2024-08-30", (
            ("New curtains for the living room, can't decide on the colour.", "What colour are the walls?"),
            ("Off-white, with a grey sofa.", "A deep colour would add warmth."),
            ("Ordered the mustard ones in the end.", "Mustard and grey look great together."),
            ("My mum has floral curtains in every room.", "A classic look."),
            ("Should the curtains touch the floor?", "Floor length usually looks more elegant."),
        )),
    )),
    AnswerCase("exam-result", "answer-to-question", "What grade did I get in my driving theory test?", "D1:2", (
        ("D1", "2024-09-09", (
            ("Just got my driving theory test result!", "And? How did it go?"),
            ("Passed, 47 out of 50.", "Brilliant score!"),
            ("My brother failed his theory test twice.", "Lots of people need a second go."),
            ("When should I book the practical test?", "As soon as you can; waiting lists are long."),
            ("How many lessons do most people need?", "Around 40 hours with an instructor, on average."),
        )),
    )),
    AnswerCase("lost-wallet", "place", "Where did my wallet turn up?", "D1:3", (
        ("D1", "2024-10-15", (
            ("My wallet's gone, I think I left it on the bus.", "Call the bus company's lost property."),
            ("They don't have it. I'm cancelling my cards.", "Good idea, do that first."),
            ("Update: a lady handed it in at the post office on the high street!", "There are good people out there."),
            ("My friend lost her wallet in Rome and never got it back.", "Tourist areas are harder."),
            ("Do I need to order new cards anyway?", "If you've cancelled them, yes."),
        )),
    )),
    AnswerCase("gift", "choice", "What did I get my dad for Father's Day?", "D1:3", (
        ("D1", "2024-06-10", (
            ("Father's Day is on Sunday and I have no idea what to get my dad.", "What's he into?"),
            ("Gardening and old jazz records.", "A rare record or good secateurs?"),
            ("Got him a Miles Davis first pressing from the record shop.", "He'll treasure that."),
            ("My husband wants a new drill for Father's Day, so unromantic.", "Practical gifts get used though."),
            ("Should I get a card too?", "A handwritten card always means a lot."),
        )),
    )),
    AnswerCase("tent", "choice", "Which tent did we buy for the camping trip?", "D1:3", (
        ("D1", "2024-04-27", (
            ("We need a tent for the Lake District trip, four of us.", "Dome or tunnel tent?"),
            ("The shop had a Vango tunnel and a Coleman dome on offer.", "Tunnels handle wind better; domes are easier to pitch."),
            ("Picked up the Vango, it packs down smaller too.", "Great for carrying to the campsite."),
            ("My uncle still camps in a canvas tent from the eighties.", "Those are heavy but last forever."),
            ("What sleeping bags do we need for May?", "A three-season bag rated to about zero degrees."),
        )),
    )),
    AnswerCase("haircut", "price", "How much was my haircut?", "D1:3", (
        ("D1", "2024-05-13", (
            ("Finally got a haircut, first in six months.", "Bet that feels good! New style?"),
            ("Short on the sides, a bit longer on top.", "Classic and easy to manage."),
            ("It was 35 with the beard trim, not bad.", "Reasonable for a cut and trim."),
            ("My partner pays 80 for a haircut in the city.", "City salons charge a premium."),
            ("How often should I go back?", "Every four to six weeks keeps the shape."),
        )),
    )),
    AnswerCase("glasses", "place", "Where were my glasses?", "D1:3", (
        ("D1", "2024-06-03", (
            ("I can't find my glasses and I can barely see the screen.", "Where did you have them last?"),
            ("Reading in bed last night, I think.", "Check the bedside table and under the pillows."),
            ("They were on top of my head the whole time.", "That happens to everyone at least once!"),
            ("My dad has three pairs of glasses and still loses them.", "Maybe a chain would help him."),
            ("Should I get a spare pair?", "A cheap spare pair is a good backup."),
        )),
    )),
    AnswerCase("babysitter", "person", "Who is babysitting on Saturday?", "D1:3", (
        ("D1", "2024-07-11", (
            ("We've got a wedding on Saturday and need a babysitter.", "Have you asked family?"),
            ("My parents are away that weekend.", "Maybe a neighbour or a local sitter?"),
            ("Our neighbour's daughter Amira said yes, she's done first aid.", "Perfect, that's reassuring."),
            ("My friend uses an agency but it's expensive.", "Agencies do vet their sitters though."),
            ("What should I leave for the babysitter?", "Emergency numbers, bedtime routine, and snacks."),
        )),
    )),
    AnswerCase("paint-brand", "choice", "Which paint did I go for in the kitchen?", "D1:3", (
        ("D1", "2024-08-19", (
            ("Repainting the kitchen, looking at paint brands.", "Kitchens need something wipeable."),
            ("Dulux or Farrow and Ball, but Farrow is twice the price.", "The finish is lovely but Dulux is tough."),
            ("Bought the Dulux in the end, the kitchen-specific one.", "Practical choice."),
            ("My sister used Farrow and Ball in her hall and loves it.", "It's beautiful in the right light."),
            ("Do I need primer over old paint?", "Only if the old paint is glossy or a much darker colour."),
        )),
    )),
    AnswerCase("train-ticket", "price", "What did the train tickets to Paris cost?", "D1:3", (
        ("D1", "2024-09-22", (
            ("Looking at the Eurostar to Paris for our anniversary.", "Romantic! When are you going?"),
            ("Mid-October, Friday to Monday.", "Book soon, prices climb."),
            ("Booked, 156 return for the two of us.", "That's a good deal for Eurostar."),
            ("My colleague flew to Paris and it cost him 300 with bags.", "The train is often easier anyway."),
            ("Which area should we stay in?", "Le Marais is lovely and central."),
        )),
    )),
    AnswerCase("kid-school", "choice", "Which school did we choose for Lily?", "D1:3", (
        ("D1", "2024-02-02", (
            ("School applications for Lily are due, we visited two primaries.", "How did they compare?"),
            ("St Mary's is closer, Hillside has the better reports.", "Distance matters a lot for mornings."),
            ("We've put Hillside first, the walk is fine.", "Fingers crossed for your first choice."),
            ("My friend's son goes to St Mary's and is happy there.", "Good to hear both are decent."),
            ("When do we find out?", "Usually mid-April, on national offer day."),
        )),
    )),
    AnswerCase("mechanic", "answer-to-question", "What was wrong with my car?", "D1:2", (
        ("D1", "2024-10-28", (
            ("Picked the car up from the garage.", "What did the mechanic find?"),
            ("The alternator was failing, that's why the battery kept dying.", "That explains it."),
            ("My neighbour's car had a similar problem with the battery.", "Batteries often get blamed first."),
            ("How long do alternators last?", "Usually 100,000 miles or so."),
            ("Do I need to warm the car up in winter?", "Not really with modern engines; just drive gently at first."),
        )),
    )),
    AnswerCase("gym-join", "choice", "Which gym did I join?", "D1:3", (
        ("D1", "2024-01-08", (
            ("New year, new gym. Two near me: PureGym and a local boxing gym.", "What kind of training do you enjoy?"),
            ("Classes more than machines.", "The boxing gym probably has better classes."),
            ("Signed up at the boxing gym, first class tomorrow.", "Exciting! Go easy on day one."),
            ("My colleague has been going to PureGym for years.", "It's convenient and cheap."),
            ("What should I eat before a morning class?", "A banana or some toast an hour before."),
        )),
    )),
    AnswerCase("engagement-ring", "price", "How much did I spend on the engagement ring?", "D1:4", (
        ("D1", "2024-12-01", (
            ("I'm going to propose at Christmas!", "Congratulations! Have you got a ring?"),
            ("Not yet, looking at sapphires rather than diamonds.", "Sapphires are gorgeous and durable."),
            ("Found one at a small jeweller in the Lanes.", "What's it like?"),
            ("Oval sapphire, little diamonds either side, 1800 altogether.", "Beautiful, she'll love it."),
            ("My best mate spent three months' salary on his ring.", "That old rule is a marketing line."),
            ("How do I hide it until Christmas?", "Somewhere only you use, like a sock drawer."),
        )),
    )),
    AnswerCase("boiler-quote", "price", "How much is the new boiler going to cost us?", "D1:3", (
        ("D1", "2024-01-15", (
            ("The engineer says our boiler is beyond repair.", "That's a pain. Are you getting quotes?"),
            ("Two companies are coming round this week.", "Ask both about warranties."),
            ("The cheaper quote came in at 2,400 fitted, with a ten-year warranty.", "That's a solid warranty."),
            ("My neighbour got a heat pump instead of a new boiler.", "Heat pumps have grants available."),
            ("How long does fitting take?", "Usually one or two days."),
        )),
    )),
    AnswerCase("sofa-bed", "choice", "Which sofa bed did we end up ordering?", "D1:3", (
        ("D1", "2024-02-20", (
            ("We need a sofa bed for the spare room, guests keep coming.", "Click-clack or pull-out?"),
            ("Pull-out, the IKEA Friheten or the one from Made.", "The Friheten has storage underneath."),
            ("Ordered the Friheten, the storage sold it.", "Handy for spare bedding."),
            ("My sister's sofa bed has a bar that digs into your back.", "A good mattress topper helps with that."),
            ("When should we book the delivery?", "A weekday morning is usually easiest."),
        )),
    )),
    AnswerCase("umbrella", "place", "Where did I leave my umbrella?", "D1:3", (
        ("D1", "2024-03-18", (
            ("Soaked again, my umbrella has vanished.", "Where did you have it last?"),
            ("At lunch with Tom, I think, or on the tram.", "Try the restaurant first."),
            ("They had it! I left it under the table at the noodle bar.", "Lucky it was still there."),
            ("My colleague buys a new umbrella every time it rains.", "That gets expensive."),
            ("Are compact umbrellas any good in wind?", "Look for a vented canopy."),
        )),
    )),
    AnswerCase("piano-teacher", "person", "Who is teaching my daughter piano?", "D1:3", (
        ("D1", "2024-04-09", (
            ("My daughter wants piano lessons.", "Lovely! Have you found a teacher?"),
            ("We tried one, but she didn't click with him.", "Fit matters a lot with kids."),
            ("We found a retired music teacher, Mrs Okafor, two streets away.", "Close by is perfect."),
            ("My nephew learns online with an app.", "Apps can work for motivated kids."),
            ("Do we need a real piano?", "A weighted-key digital piano is fine to start."),
        )),
    )),
    AnswerCase("broadband", "choice", "Which broadband provider did I switch to?", "D1:3", (
        ("D1", "2024-05-02", (
            ("My broadband keeps dropping, I want to switch.", "Have you compared providers in your area?"),
            ("Fibre is available from two companies on our street.", "Full fibre is worth it if you work from home."),
            ("Went for Hyperoptic, installation is next Tuesday.", "Their speeds are excellent."),
            ("My parents are still on copper broadband.", "They might not need much speed."),
            ("Do I need to tell my old provider?", "Usually the new one handles the switch."),
        )),
    )),
    AnswerCase("flight-delay", "price", "How much compensation did I get for the delayed flight?", "D1:3", (
        ("D1", "2024-06-14", (
            ("Our flight back from Lisbon was delayed five hours.", "That's long enough to claim compensation."),
            ("I filled in the airline's claim form.", "Keep your boarding passes."),
            ("They paid out 400 euros each!", "That's the full amount for that distance."),
            ("My friend's claim was refused because of a storm.", "Bad weather counts as extraordinary."),
            ("Can I claim for the meals at the airport too?", "Yes, with receipts."),
        )),
    )),
    AnswerCase("party-venue", "place", "Where are we having Mia's birthday party?", "D1:3", (
        ("D1", "2024-07-01", (
            ("Mia turns seven next month and wants a big party.", "How many kids are coming?"),
            ("Her whole class, about thirty.", "That's too many for a house."),
            ("Booked the soft play centre on Mill Road for the Saturday.", "Kids love soft play."),
            ("My friend did her son's party at home and regretted it.", "Thirty kids at home is a lot."),
            ("What food should we do?", "Pizza and fruit, and a cake of course."),
        )),
    )),
    AnswerCase("car-colour", "choice", "What colour did we go for on the new car?", "D1:3", (
        ("D1", "2024-08-05", (
            ("Ordering the new car this week, just the colour left to decide.", "What are the options?"),
            ("Red, grey, or a dark blue.", "Grey hides dirt well."),
            ("We went with the dark blue in the end.", "Classy choice."),
            ("My brother's red car fades in the sun.", "Some reds fade faster than others."),
            ("Should we get the paint protection?", "Often overpriced; a good wax does a lot."),
        )),
    )),
    AnswerCase("moving-day", "when", "When are we moving into the new house?", "D1:3", (
        ("D1", "2024-09-10", (
            ("We've exchanged contracts on the house!", "Congratulations! When do you complete?"),
            ("The solicitor is sorting out the date with the sellers.", "It's usually a week or two after exchange."),
            ("Completion is the 27th, so that's moving day.", "Book the removal van soon."),
            ("My friends moved house last month and it took three days.", "Moving always takes longer than planned."),
            ("Should we hire packers?", "Worth it if you have a lot of fragile things."),
        )),
    )),
    AnswerCase("lost-cat", "place", "Where did we find the cat?", "D1:3", (
        ("D1", "2024-10-22", (
            ("Our cat didn't come home last night.", "Oh no. Have you checked sheds and garages nearby?"),
            ("We've knocked on doors and put up posters.", "Posting in local groups helps too."),
            ("Found her! She was locked in the neighbour's garage.", "Thank goodness."),
            ("My friend's cat disappeared for two weeks once.", "Cats can travel surprisingly far."),
            ("Should we get her microchipped?", "Yes, it's quick and cheap."),
        )),
    )),
    AnswerCase("accountant", "person", "Who is doing our tax return this year?", "D1:3", (
        ("D1", "2024-01-28", (
            ("The tax deadline is this week and I haven't started.", "Are you doing it yourself or getting help?"),
            ("Help, definitely. It's too complicated with the rental flat.", "An accountant is worth it for rental income."),
            ("A friend recommended an accountant, Priya Shah, she's taking us on.", "Great, send her everything soon."),
            ("Apparently half our street does their own taxes online.", "It's fine for simple returns."),
            ("What records will she need?", "Rent received, expenses, and mortgage interest statements."),
        )),
    )),
    AnswerCase("kettle", "price", "How much did the new kettle cost?", "D1:3", (
        ("D1", "2024-02-12", (
            ("The kettle finally died this morning.", "Time for a new one! Any preferences?"),
            ("Something quiet, with a temperature setting for green tea.", "Variable temperature kettles are great for tea."),
            ("Found a Bosch one on sale for 49.", "That's a good price for variable temperature."),
            ("Funny, a colleague spent 150 on a designer kettle last year.", "Designer kettles are mostly about looks."),
            ("How do I descale it?", "Boil a mix of water and white vinegar, then rinse well."),
        )),
    )),
    AnswerCase("dress", "choice", "Which dress did I pick for the wedding?", "D1:3", (
        ("D1", "2024-03-09", (
            ("Shopping for a wedding guest dress, I've got two on hold.", "Ooh, tell me about them."),
            ("A green satin midi and a floral wrap dress.", "Both sound lovely. What's the venue like?"),
            ("I'm going with the green satin, it feels more special.", "Satin for a wedding is perfect."),
            ("The bride's sister is wearing floral too, apparently.", "Good thing you chose the green!"),
            ("What shoes would go with it?", "Gold or nude heels would work nicely."),
        )),
    )),
    AnswerCase("passport-office", "place", "Where did I renew my passport?", "D1:3", (
        ("D1", "2024-04-16", (
            ("My passport expires in June and we fly in July.", "Renew it now, it can take weeks."),
            ("The online service says ten weeks at the moment.", "There's a fast-track option in person."),
            ("Did the fast track at the passport office in Peterborough, got it the same day.", "That's a relief."),
            ("Our neighbours waited three months for theirs last summer.", "The summer rush is the worst."),
            ("Should I get a passport cover?", "A cover stops the corners from bending."),
        )),
    )),
    AnswerCase("dog-walker", "person", "Who walks our dog on weekdays?", "D1:3", (
        ("D1", "2024-05-21", (
            ("Back in the office full time from next week, worried about the dog.", "Could someone walk him at lunch?"),
            ("We asked around the neighbourhood.", "Local dog walkers are often booked up."),
            ("Sorted it: a student called Jonas walks him every weekday at noon.", "Perfect, he'll love the company."),
            ("Some friends use doggy daycare but it's expensive.", "Daycare suits very social dogs."),
            ("How long should a walk be?", "For his size, about an hour."),
        )),
    )),
    AnswerCase("laptop-repair", "price", "What did the laptop repair come to?", "D1:3", (
        ("D1", "2024-06-30", (
            ("Spilled coffee on my laptop keyboard.", "Oh no! Did you turn it off straight away?"),
            ("Yes, and dried it upside down, but some keys stick.", "A repair shop can replace the keyboard."),
            ("The shop replaced the keyboard for 130.", "Not bad compared with a new laptop."),
            ("A new laptop like mine is over 1000 now.", "Repair was definitely the right call."),
            ("How do I avoid this next time?", "A keyboard cover, or keep drinks on a side table."),
        )),
    )),
    AnswerCase("restaurant-choice", "choice", "Which restaurant did we book for our anniversary?", "D1:3", (
        ("D1", "2024-07-18", (
            ("Our tenth anniversary is coming up, need somewhere nice for dinner.", "Congratulations! Any cuisine in mind?"),
            ("We love Japanese, or there's the French place by the river.", "Both would feel special."),
            ("Booked Sakura for Saturday, the tasting menu.", "A tasting menu is perfect for an anniversary."),
            ("The French place had terrible reviews recently anyway.", "Good that you avoided it."),
            ("Should I get flowers too?", "Flowers and a card never go wrong."),
        )),
    )),
    AnswerCase("keys-spare", "place", "Where did we hide the spare key?", "D1:3", (
        ("D1", "2024-08-08", (
            ("We keep getting locked out, need a spare key somewhere.", "A key safe or a trusted neighbour?"),
            ("A key safe feels safer than a plant pot.", "Much safer, and you can change the code."),
            ("Fitted the key safe behind the side gate, code is our old house number.", "Great, no more lockouts."),
            ("The previous owners kept a key under the doormat!", "That's the first place burglars look."),
            ("Should we tell the neighbours?", "Only the ones you trust."),
        )),
    )),
    AnswerCase("course", "choice", "Which evening course did I sign up for?", "D1:3", (
        ("D1", "2024-09-03", (
            ("Want to do an evening course this autumn.", "Great idea! What are you interested in?"),
            ("Pottery or Spanish, can't decide.", "Pottery is very relaxing after work."),
            ("Signed up for pottery on Wednesdays at the college.", "You'll be making mugs by Christmas."),
            ("A friend of mine did the Spanish course and loved it.", "Maybe next term then."),
            ("What should I wear to pottery?", "Old clothes, clay gets everywhere."),
        )),
    )),
    AnswerCase("vet-name", "person", "Who is our new vet?", "D1:2", (
        ("D1", "2024-10-12", (
            ("We registered the cats at the new vet practice today.", "How did you find them?"),
            ("Lovely. Dr Hughes checked both cats and said they're healthy.", "Great news."),
            ("The old vet practice closed down last month.", "That happens a lot lately."),
            ("How often do cats need a check-up?", "Once a year, twice when they're older."),
            ("Are vaccinations yearly?", "Boosters are usually yearly, yes."),
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
#: retriever finds 64 of these 80 today. It misses answers in a later session than their subject,
#: answers that are a person's name or a date, and outcomes asked or told in words the router's
#: answer kinds do not know ("We've put Hillside first", "Which gym did I join?").
FLOOR = 0.78


def test_the_answering_round_is_in_the_top_two(memories):
    missed = []
    for case in CASES:
        keys = round_keys(memories[case.name].as_retriever(k=2).retrieve(case.question))
        if case.answer not in keys[:2]:
            missed.append(f"  [{case.kind}] {case.name}: {case.question!r} expected {case.answer}, got {keys[:2]}")
    found = len(CASES) - len(missed)
    assert found >= FLOOR * len(CASES), (
        f"answering round in the top 2 for {found}/{len(CASES)} cases (need {FLOOR:.0%}); missed:\n" + "\n".join(missed))


def test_a_round_holding_the_price_asked_for_carries_from_the_round_naming_the_subject(memories):
    """"Half price in the sale, so 450 instead of 900." never says "sofa": it follows "We went with a
    green corduroy three-seater", which follows the round that does. It holds a price, as the
    question asks, so it carries from the best of the three rounds before it and ranks first; the
    in-laws' 3000 sofa, a new thread, does not."""
    index, question = memories["sofa"], "How much did our new sofa cost?"
    hits = index.as_retriever(k=3).retrieve(question)
    first = hits[0].node.metadata
    assert first["round_key"] == "D1:4", round_keys(hits)
    assert first["vmem"]["ranks"]["holds_answer"] == 1 and first["vmem"]["follows"] == "D1:1"
    assert any(r.startswith("asks for a price:") for r in first["vmem"]["reasons"])
    assert all("holds_answer" not in h.node.metadata["vmem"]["ranks"] for h in hits if h.node.metadata["round_key"] == "D1:5")
    assert "D1:4" not in round_keys(index.as_retriever(k=3, answer_reach=0).retrieve(question)), "without it, the answer is not in the top 3"


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
