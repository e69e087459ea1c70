"""A synthetic conversation set written by us: users chatting with an assistant over weeks.

Each user returns to a few favourite topics across sessions (so recurrence fires), sessions
spread over days, weeks and months (so windows close), and messages mention when things
happen ("last weekend", "next Friday", "in March") for semantic time. Deterministic per seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta

from schemas.events import Message, Role, Turn

TOPICS: dict[str, tuple[list[str], list[str]]] = {
    "running": (
        [
            "I ran {n} kilometres {when} and my knee felt fine for once.",
            "My marathon training plan says a long run of {n} km {when}.",
            "Do you think I should buy new running shoes before the half marathon {when}?",
            "I joined a running club {when}; we do intervals on the track.",
            "My pace on the {n} km run {when} was faster than last month.",
        ],
        [
            "Nice progress on your running. Keep the long runs easy.",
            "For marathon training, rest days matter as much as the long run.",
            "Running shoes usually last 600 to 800 km, so it may be time.",
        ],
    ),
    "cooking": (
        [
            "I cooked a {dish} {when} and the whole family loved it.",
            "Can you suggest a vegetarian {dish} recipe for {when}?",
            "I burned the {dish} {when}, the oven runs too hot.",
            "I'm hosting dinner {when} and want to make {dish} again.",
            "My grandmother's {dish} recipe uses a lot of garlic and thyme.",
        ],
        [
            "That dish sounds delicious; roasting at a lower temperature may help.",
            "For a vegetarian version, try chickpeas and smoked paprika.",
            "Cooking for guests is easier if you prepare the sauce ahead.",
        ],
    ),
    "job": (
        [
            "I have a job interview at {company} {when} for a data engineer role.",
            "The interview at {company} {when} went well, they asked about Kafka.",
            "I'm nervous about the salary negotiation with {company} {when}.",
            "{company} offered me the position {when}! I start in {month}.",
            "My manager at {company} wants me to lead the streaming project.",
        ],
        [
            "Congratulations on the interview; prepare questions about the team.",
            "For the negotiation, know your market rate and your minimum.",
            "Leading a project is a great chance to grow.",
        ],
    ),
    "dog": (
        [
            "My dog {pet} chewed my shoes again {when}.",
            "I took {pet} to the vet {when}; she needs a vaccine booster.",
            "{pet} learned to sit and stay {when}, I'm so proud of her.",
            "We walked {pet} along the river {when} for an hour.",
            "{pet} doesn't like the new dog food I bought {when}.",
        ],
        [
            "Dogs chew when bored; puzzle toys can help.",
            "Vaccine boosters are routine; the vet will remind you.",
            "Positive reinforcement works well for training dogs.",
        ],
    ),
    "moving": (
        [
            "We're moving to {city} {when} and I still have to pack the kitchen.",
            "The landlord in {city} wants the deposit {when}.",
            "I found a flat in {city} close to the park {when}.",
            "Packing boxes for the move to {city} took all {when}.",
            "My new neighbours in {city} invited us for coffee {when}.",
        ],
        [
            "Moving is stressful; label boxes by room to save time.",
            "Check the lease terms before paying the deposit.",
            "Being close to a park sounds lovely.",
        ],
    ),
    "guitar": (
        [
            "I practised the guitar for {n} minutes {when}, barre chords are hard.",
            "My guitar teacher wants me to learn a {genre} song {when}.",
            "I played guitar at the open mic {when} and didn't mess up.",
            "I bought new strings for my guitar {when}; it sounds brighter.",
            "Finger-picking on the guitar is finally clicking since {when}.",
        ],
        [
            "Short daily practice beats long weekly sessions.",
            "Barre chords get easier as your hand strength grows.",
            "Playing in front of people is a big step, well done.",
        ],
    ),
}

CHITCHAT = [
    "The weather is grey today.",
    "I'm a bit tired, long week.",
    "Thanks, that's helpful!",
    "What a day.",
    "I watched a documentary about octopuses.",
]
WHEN = [
    "yesterday",
    "last weekend",
    "this weekend",
    "next Friday",
    "two days ago",
    "last week",
    "today",
    "tomorrow",
    "in March",
    "next month",
    "on Saturday",
    "this morning",
]
FILL = {
    "dish": ["lasagna", "curry", "risotto", "shepherd's pie", "ramen", "paella"],
    "company": ["Acme", "Globex", "Initech", "Umbrella Labs"],
    "pet": ["Biscuit", "Luna", "Pepper"],
    "city": ["Lisbon", "Leeds", "Porto", "Utrecht"],
    "genre": ["blues", "folk", "jazz"],
    "month": ["March", "April", "June"],
}


def _fill(template: str, rng: random.Random) -> str:
    values = {k: rng.choice(v) for k, v in FILL.items()}
    return template.format(n=rng.randint(3, 42), when=rng.choice(WHEN), **values)


def generate(
    users: int = 5,
    days: int = 45,
    *,
    tenant: str = "demo",
    start: datetime = datetime(2025, 1, 6, 9, 0),
    seed: int = 7,
) -> Iterator[Turn]:
    """Turns in per-user time order; users interleave day by day like real traffic."""
    rng = random.Random(seed)
    profiles = {f"user-{i:04d}": rng.sample(sorted(TOPICS), 3) for i in range(users)}
    for day in range(days):
        for user_id, favourites in profiles.items():
            if rng.random() < 0.45:  # not every user talks every day
                continue
            first_hour = rng.randint(0, 6)
            for s in range(rng.choice([1, 1, 2])):
                # A second session starts 7-8 h after the first: a user's turns arrive in time order.
                ts = start + timedelta(days=day, hours=first_hour + 7 * s, minutes=rng.randint(0, 59))
                session_id = f"{user_id}-d{day}-s{s}"
                topic = rng.choice(favourites)
                for t in range(rng.randint(4, 9)):
                    prompts, replies = TOPICS[topic]
                    text = rng.choice(CHITCHAT) if rng.random() < 0.15 else _fill(rng.choice(prompts), rng)
                    yield Turn(
                        tenant=tenant,
                        user_id=user_id,
                        session_id=session_id,
                        turn_id=f"{session_id}-t{t}",
                        ts=ts + timedelta(minutes=2 * t),
                        messages=[
                            Message(speaker=user_id, role=Role.USER, content=text),
                            Message(speaker="assistant", role=Role.ASSISTANT, content=rng.choice(replies)),
                        ],
                        metadata={"topic": topic},
                    )
