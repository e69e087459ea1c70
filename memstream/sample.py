"""A synthetic conversation set written by us: users chatting with an assistant over weeks.

Each user has a persona (name, city, employer, two hobbies, sometimes a dog) and a timeline: a move
from one city to another and, for most, a new job, each at a date. What a user says follows that
timeline: before the move they live in the old city and then plan the move in the future tense;
after it they have moved and live in the new one. Hobbies happen on fixed weekdays, and a message
about one names its most recent or next occurrence with a time expression that is true relative to
the turn's date ("last weekend" only about the weekend before, "this Thursday" only ahead). Users
return to the same topics across sessions (so recurrence fires), sessions spread over days, weeks
and months (so windows close), and some turns are chit-chat. Deterministic per seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import partial

from schemas.events import Message, Role, Turn

NAMES = ["Maya", "Tomas", "Priya", "Jonas", "Ines", "Kofi", "Lena", "Ravi", "Sofia", "Daniel", "Aiko"]
# city -> a place near home there
CITIES = {
    "Lisbon": "the river",
    "Porto": "the Douro",
    "Leeds": "Hyde Park",
    "Utrecht": "the canal",
    "Lyon": "the Saône",
    "Valencia": "the Turia gardens",
    "Ghent": "the Leie",
    "Bristol": "the harbourside",
}
EMPLOYERS = ["Acme", "Globex", "Initech", "Umbrella Labs", "Hooli", "Vandelay Industries"]
ROLES = ["data engineer", "backend developer", "product designer", "QA engineer", "site reliability engineer"]
PROJECTS = ["billing", "search", "onboarding", "streaming", "mobile app"]
DOGS = ["Biscuit", "Luna", "Pepper", "Miso"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


@dataclass(frozen=True)
class Persona:
    user_id: str
    name: str
    home: str  # where they live until move_day
    new_home: str
    move_day: date
    employer: str
    role: str
    new_employer: str | None  # None: they keep their job
    job_day: date  # the first day at new_employer
    hobbies: tuple[str, ...]
    dog: str | None
    seed: int  # fixes what each hobby occurrence was (the song played, the distance run)


def when(event: date, said: date) -> str:
    """A time expression for ``event`` as said on ``said`` that memstream.semantic_time resolves
    to the day, weekend or week holding ``event`` (weeks run Monday to Sunday)."""
    days = (event - said).days
    weeks = (event - timedelta(days=event.weekday()) - (said - timedelta(days=said.weekday()))).days // 7
    name = WEEKDAYS[event.weekday()]
    if days == 0:
        return "today"
    if days == -1:
        return "yesterday"
    if days == 1:
        return "tomorrow"
    if days < 0:
        if weeks == -1 and event.weekday() >= 5:
            return "last weekend"
        if days >= -6:
            return f"on {name}"  # the most recent such day before today
        if weeks == -1:
            return "last week"
        return f"{_number(-weeks)} weeks ago"
    if weeks == 0:
        return f"this {name}"
    if weeks == 1:
        if event.weekday() >= 5:
            return "next weekend"
        # "next Friday" is the first Friday after today: next week's only if this week's has passed
        return f"next {name}" if event.weekday() <= said.weekday() else "next week"
    return f"{_number(weeks)} weeks from now"


def _number(n: int) -> str:
    return NUMBERS[n] if n < len(NUMBERS) else str(n)


def _last(weekday: int, said: date) -> date:
    """The most recent ``weekday`` strictly before ``said``."""
    return said - timedelta(days=(said.weekday() - weekday - 1) % 7 + 1)


def _next(weekday: int, said: date) -> date:
    """The first ``weekday`` strictly after ``said``."""
    return said + timedelta(days=(weekday - said.weekday() - 1) % 7 + 1)


@dataclass(frozen=True)
class Hobby:
    weekday: int  # when it happens every week
    past: list[str]  # about the last occurrence, {when} resolving to it
    future: list[str]  # about the next one
    replies: list[str]
    fill: dict[str, list[str]]


HOBBIES = {
    "running": Hobby(
        5,
        [
            "I ran {km} km along {place} {when} and my knee felt fine for once.",
            "My long run {when} was {km} km, my pace was faster than last month.",
            "The running club met at {place} {when}; we did {km} km together.",
        ],
        [
            "I'm planning a long run of {km} km {when}, my training plan says so.",
            "Do you think I should buy new running shoes before the long run {when}?",
        ],
        [
            "Nice progress on your running. Keep the long runs easy.",
            "Rest days matter as much as the long run.",
            "Running shoes usually last 600 to 800 km, so it may be time.",
        ],
        {"km": ["8", "10", "12", "14", "16", "18"]},
    ),
    "cooking": Hobby(
        6,
        [
            "I cooked {dish} for friends {when} and everyone loved it.",
            "I tried a new {dish} recipe {when}, the oven at home runs too hot.",
            "The {dish} I made {when} used my grandmother's trick with garlic and thyme.",
        ],
        [
            "I'm hosting dinner {when} and want to make {dish}.",
            "Can you suggest a vegetarian side for the {dish} I'm cooking {when}?",
        ],
        [
            "That sounds delicious; roasting at a lower temperature may help.",
            "For a vegetarian side, try chickpeas with smoked paprika.",
            "Cooking for guests is easier if you prepare the sauce ahead.",
        ],
        {"dish": ["lasagna", "a curry", "risotto", "ramen", "paella", "a shepherd's pie"]},
    ),
    "guitar": Hobby(
        3,
        [
            "My guitar lesson {when} was all barre chords, my hand hurt afterwards.",
            "I played {song} at my guitar lesson {when} without a mistake.",
            "My guitar teacher showed me a finger-picking pattern {when}.",
        ],
        [
            "My next guitar lesson is {when} and I still can't play {song} cleanly.",
            "I want to play {song} for my teacher at the guitar lesson {when}.",
        ],
        [
            "Short daily practice beats long weekly sessions.",
            "Barre chords get easier as your hand strength grows.",
            "Slow it down with a metronome, then speed up.",
        ],
        {"song": ["Blackbird", "Wonderwall", "a blues in E", "Tears in Heaven"]},
    ),
    "climbing": Hobby(
        2,
        [
            "I went bouldering {when} and finally sent a {grade} problem.",
            "At the climbing gym {when} I fell off the same {grade} route five times.",
        ],
        [
            "I'm going bouldering {when} to try that {grade} problem again.",
            "The climbing gym has new {grade} routes and I'm going {when}.",
        ],
        [
            "Rest your fingers between sessions; tendons adapt slowly.",
            "Watching others climb a problem often shows the beta.",
        ],
        {"grade": ["V3", "V4", "V5", "6b", "6c"]},
    ),
}
DOG = Hobby(
    6,
    [
        "I took {dog} to the vet {when}; she needs a vaccine booster.",
        "We walked {dog} along {place} {when} for an hour.",
        "{dog} chewed my shoes again {when}.",
    ],
    [
        "{dog} has a vet appointment {when} for her booster.",
        "I'm taking {dog} to puppy class {when}.",
    ],
    [
        "Dogs chew when bored; puzzle toys can help.",
        "Vaccine boosters are routine; the vet will remind you.",
        "Positive reinforcement works well for training dogs.",
    ],
    {},
)
# small talk and the reply it gets
CHITCHAT = [
    ("The weather in {city} is grey today.", "A grey day is a good day for a slow evening."),
    ("I'm a bit tired, long week.", "Take it easy tonight."),
    ("Thanks, that's helpful!", "Glad to help!"),
    ("I watched a documentary about octopuses.", "Octopuses are remarkable animals."),
    ("What a day.", "Sounds like a lot. Want to talk about it?"),
]
# the assistant's second sentence: what keeps one week's exchange from repeating another's verbatim
ASIDES = [
    "How are you feeling about it?",
    "Tell me how it goes.",
    "What's next on your list?",
    "Anything I can help you plan?",
    "That's worth noting down.",
    "One thing at a time.",
    "Is that what you expected?",
    "Let me know if you want ideas.",
]
FOLLOW_UPS = [
    ("Any other tips?", "Take it one step at a time and write down what works."),
    ("Does that sound reasonable to you?", "It sounds reasonable, yes."),
    ("Sorry, I keep going on about {topic}.", "No need to apologise, I'm happy to listen."),
]


def _persona(i: int, days: int, start: date, rng: random.Random) -> Persona:
    home, new_home = rng.sample(sorted(CITIES), 2)
    employer, new_employer = rng.sample(EMPLOYERS, 2)
    hobbies = tuple(rng.sample(sorted(HOBBIES), 2))
    return Persona(
        user_id=f"user-{i:04d}",
        name=NAMES[i % len(NAMES)] + (f" {i // len(NAMES)}" if i >= len(NAMES) else ""),
        home=home,
        new_home=new_home,
        move_day=start + timedelta(days=round(days * rng.uniform(0.35, 0.55))),
        employer=employer,
        role=rng.choice(ROLES),
        new_employer=new_employer if rng.random() < 0.75 else None,
        job_day=start + timedelta(days=round(days * rng.uniform(0.5, 0.8))),
        hobbies=hobbies,
        dog=rng.choice(DOGS) if rng.random() < 0.5 else None,
        seed=rng.getrandbits(32),
    )


def _city(p: Persona, said: date) -> str:
    return p.home if said < p.move_day else p.new_home


def _moving(p: Persona, said: date, rng: random.Random) -> tuple[str, str]:
    """The move, as it stands on ``said``: a plan, the days around it, or settled in."""
    old, new, day = p.home, p.new_home, p.move_day
    to_move = (day - said).days
    if to_move > 14:
        lines = [
            f"I live in {old}, in a small flat near {CITIES[old]}, and the rent went up again.",
            f"We're thinking about moving to {new}; my partner has a job offer there.",
            f"Our flat in {old} is too small now that we both work from home, so moving is on our minds.",
        ]
        replies = ["A bigger place makes working from home easier.", f"{new} is a lovely city to move to."]
    elif to_move > 0:
        lines = [
            f"We're moving to {new} {when(day, said)} and I still have to pack the kitchen.",
            f"We signed the lease for a flat in {new}; the movers come {when(day, said)}.",
            f"I packed boxes all evening for the move to {new} {when(day, said)}.",
        ]
        replies = ["Label boxes by room, it saves hours.", "Keep a box of essentials for the first night."]
    elif to_move > -21:
        lines = [
            f"We moved to {new} {when(day, said)}; the flat is still full of boxes.",
            f"Since the move to {new} I walk to work along {CITIES[new]}.",
        ]
        if _last(6, said) > day:
            lines.append(f"Our new neighbours in {new} invited us for coffee {when(_last(6, said), said)}.")
        replies = ["Settling in takes a few weeks.", "Nice neighbours make a new city feel like home."]
    else:
        lines = [
            f"Now I live in {new}, close to {CITIES[new]}, and I don't miss {old} much.",
            f"Life in {new} is quieter than in {old}; moving was the right call.",
            f"A friend from {old} visits us in {new} {when(_next(5, said), said)}.",
        ]
        replies = ["It sounds like the move was worth it.", "Visits from old friends are the best."]
    return rng.choice(lines), rng.choice(replies)


def _work(p: Persona, said: date, rng: random.Random) -> tuple[str, str]:
    """The job, as it stands on ``said``: the old one, the interviews and offer, or the new one."""
    new = p.new_employer
    to_start = (p.job_day - said).days
    if new is None or to_start > 28:
        project = PROJECTS[len(p.employer) % len(PROJECTS)]
        lines = [
            f"I work at {p.employer}; I'm a {p.role} there and the team is great.",
            f"My manager at {p.employer} wants me to lead the {project} project.",
            f"The {project} release at {p.employer} slipped again {when(_last(4, said), said)}.",
        ]
        replies = ["Leading a project is a great chance to grow.", "Releases slip; a smaller scope helps."]
    elif to_start > 14:
        interview = p.job_day - timedelta(days=21)
        lines = (
            [f"I have a job interview at {new} {when(interview, said)} for a {p.role} role."]
            if said < interview
            else [f"The interview at {new} {when(interview, said)} went well, they asked about Kafka."]
        ) + [f"I'm nervous about leaving {p.employer} after all these years."]
        replies = ["Prepare questions about the team you'd join.", "Change is scary, but it sounds exciting."]
    elif to_start > 0:
        lines = [
            f"{new} offered me the {p.role} job! I start {when(p.job_day, said)}.",
            f"I handed in my notice at {p.employer}; my first day at {new} is {when(p.job_day, said)}.",
        ]
        replies = ["Congratulations on the offer!", "Leave on good terms; people meet again."]
    else:
        lines = [
            f"Now I work at {new}, as a {p.role} on the payments team.",
            f"My first weeks at {new} have been busy but fun.",
            f"I started my new job at {new} {when(p.job_day, said)} and I like my team.",
        ]
        replies = ["Sounds like a good fit.", "The first months in a new job are the steepest."]
    return rng.choice(lines), rng.choice(replies)


def _hobby(hobby: Hobby, p: Persona, said: date, rng: random.Random) -> tuple[str, str]:
    """The hobby's last occurrence (past tense) or its next one (future tense)."""
    if rng.random() < 0.6:
        template, event = rng.choice(hobby.past), _last(hobby.weekday, said)
    else:
        template, event = rng.choice(hobby.future), _next(hobby.weekday, said)
    # One occurrence has one song, one distance: the same in every turn that mentions it.
    fixed = random.Random(f"{p.seed}/{hobby.weekday}/{event}")
    values = {k: fixed.choice(v) for k, v in sorted(hobby.fill.items())}
    text = template.format(when=when(event, said), place=CITIES[_city(p, event)], dog=p.dog, **values)
    return text, rng.choice(hobby.replies)


def _chat(p: Persona, topic: str, said: date, rng: random.Random) -> tuple[str, str]:
    """Small talk, or a follow-up question on the session's topic."""
    text, reply = rng.choice(FOLLOW_UPS if rng.random() < 0.5 else CHITCHAT)
    return text.format(topic=topic, city=_city(p, said)), reply


def _topics(p: Persona) -> dict[str, Callable[[Persona, date, random.Random], tuple[str, str]]]:
    topics: dict[str, Callable[[Persona, date, random.Random], tuple[str, str]]] = {
        "moving": _moving,
        "work": _work,
    }
    for name in p.hobbies:
        topics[name] = partial(_hobby, HOBBIES[name])
    if p.dog is not None:
        topics["dog"] = partial(_hobby, DOG)
    return topics


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
    personas = [_persona(i, days, start.date(), rng) for i in range(users)]
    for day in range(days):
        for p in personas:
            if rng.random() < 0.45:  # not every user talks every day
                continue
            first_hour = rng.randint(0, 6)
            topics = _topics(p)
            for s in range(rng.choice([1, 1, 2])):
                # A second session starts 7-8 h after the first: a user's turns arrive in time order.
                ts = start + timedelta(days=day, hours=first_hour + 7 * s, minutes=rng.randint(0, 59))
                session_id = f"{p.user_id}-d{day}-s{s}"
                topic = rng.choice(sorted(topics))
                said_before: set[str] = set()
                for t in range(rng.randint(4, 9)):
                    said = (ts + timedelta(minutes=2 * t)).date()
                    text, reply = topics[topic](p, said, rng)
                    if text in said_before or rng.random() < 0.15:  # no one says the same thing twice
                        text, reply = _chat(p, topic, said, rng)
                    said_before.add(text)
                    reply = f"{reply} {rng.choice(ASIDES)}"
                    yield Turn(
                        tenant=tenant,
                        user_id=p.user_id,
                        session_id=session_id,
                        turn_id=f"{session_id}-t{t}",
                        ts=ts + timedelta(minutes=2 * t),
                        messages=[
                            Message(speaker=p.name, role=Role.USER, content=text),
                            Message(speaker="assistant", role=Role.ASSISTANT, content=reply),
                        ],
                        metadata={"topic": topic},
                    )
