"""A synthetic conversation set written by us: users chatting with an assistant over weeks.

Each user has a persona (name, city, employer, two hobbies, sometimes a dog) and a timeline: a move
from one city to another and, for most, a new job (on a Monday), each at a date. What a user says
follows that timeline: before the move they say, in several wordings, that they live in the old city
(often enough for recurrence to make it a fact) and plan the move; from the move day on they have
moved and now live in the new one (an update that supersedes the old fact). Hobbies happen on fixed
weekdays; one occurrence has one story (one outcome, one song, one distance) in every turn about it,
and a message names the most recent or the next occurrence with a time expression that is true
relative to the turn's date ("last weekend" only about the weekend before, "this Thursday" only
ahead). A session opens on its topic; each user line is said at most once a day; small talk is a
small part of a session and never a first-person statement. Users return to the same topics across
sessions (so recurrence fires), sessions spread over days, weeks and months (so windows close).
Deterministic per seed.

It ships in the package because ``memstream sample`` writes it (examples/sample.jsonl, which ``memstream
demo`` replays, is one such file); the tests and benches use it as their conversations. It stays in
``apps``, not beside the test doubles of ``memstream.testing``: the layers keep apps and testing apart.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import partial

from memstream.schemas.events import DEFAULT_TENANT, Message, Role, Turn

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
    """A time expression for ``event`` as said on ``said`` that memstream.core.semantic_time resolves
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


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _number(n: int) -> str:
    return NUMBERS[n] if n < len(NUMBERS) else str(n)


def _last(weekday: int, said: date) -> date:
    """The most recent ``weekday`` on or before ``said``: on the day itself, today's."""
    return said - timedelta(days=(said.weekday() - weekday) % 7)


def _next(weekday: int, said: date) -> date:
    """The first ``weekday`` strictly after ``said``."""
    return said + timedelta(days=(weekday - said.weekday() - 1) % 7 + 1)


Line = tuple[str, str]  # what the user says, and the assistant's reply to it
Slot = list[Line]  # one thing to say, in one of these wordings


@dataclass(frozen=True)
class Hobby:
    weekday: int  # when it happens every week
    # What happened at one occurrence: one story per occurrence, its lines consistent with each other
    # ({when} resolves to the occurrence). One occurrence never both "finally sent" and "fell off".
    stories: list[list[Line]]
    plans: list[Line]  # about the next occurrence; true whichever story it turns into
    fill: dict[str, list[str]]  # fixed per occurrence: one run has one distance, one dinner one dish


HOBBIES = {
    "running": Hobby(
        5,
        [
            [
                (
                    "I ran {km} km along {place} {when} and my knee felt fine for once.",
                    "Good to hear the knee held up. Keep the long runs easy.",
                ),
                ("My long run {when} was faster than last month's.", "Nice progress on your running."),
            ],
            [
                (
                    "The running club met at {place} {when}; we did {km} km together.",
                    "Running in a group makes the distance pass quickly.",
                ),
                ("After the club run {when} we all went for breakfast.", "The best part of a long run."),
            ],
            [
                (
                    "I had to stop after 5 km of my long run {when}, my calves cramped.",
                    "Rest days matter as much as the long run.",
                ),
                ("My calves are still sore from the run {when}.", "Stretching and sleep help them recover."),
            ],
        ],
        [
            (
                "I'm planning a long run of {km} km {when}, my training plan says so.",
                "Start slower than feels necessary.",
            ),
            (
                "Do you think I should buy new running shoes before the long run {when}?",
                "Running shoes usually last 600 to 800 km, so it may be time.",
            ),
        ],
        {"km": ["12", "14", "16", "18", "21"]},
    ),
    "cooking": Hobby(
        6,
        [
            [
                ("I cooked {dish} for friends {when} and everyone loved it.", "That sounds delicious."),
                ("My friends asked for the {dish} recipe after dinner {when}.", "A good sign it worked."),
            ],
            [
                (
                    "I tried a new {dish} recipe {when}, but I put in far too much salt.",
                    "Taste as you go; it's easy to fix early.",
                ),
                ("Everyone was polite about the salty {dish} {when}.", "Friends are kind like that."),
            ],
            [
                (
                    "The {dish} I made {when} used my grandmother's trick with garlic and thyme.",
                    "Family recipes are the best ones.",
                ),
            ],
        ],
        [
            ("I'm hosting dinner {when} and want to make {dish}.", "Prepare the sauce ahead, it saves time."),
            (
                "Can you suggest a vegetarian side for the {dish} I'm cooking {when}?",
                "Try chickpeas with smoked paprika.",
            ),
        ],
        {"dish": ["lasagna", "curry", "risotto", "ramen", "paella", "shepherd's pie"]},
    ),
    "guitar": Hobby(
        3,
        [
            [
                (
                    "My guitar lesson {when} was mostly barre chords, my hand hurt afterwards.",
                    "Barre chords get easier as your hand strength grows.",
                ),
                (
                    "After the barre chords {when} my teacher told me to practise ten minutes a day.",
                    "Short daily practice beats long weekly sessions.",
                ),
            ],
            [
                (
                    "I played {song} at my guitar lesson {when} without a mistake.",
                    "Well done, all that practice paid off.",
                ),
                ("My guitar teacher was impressed with how I played {song} {when}.", "You've earned that."),
            ],
            [
                (
                    "My guitar teacher showed me a finger-picking pattern for {song} {when}.",
                    "Slow it down with a metronome, then speed up.",
                ),
            ],
        ],
        [
            (
                "I want to play {song} for my teacher at the guitar lesson {when}.",
                "Play it slowly a few times before the lesson.",
            ),
            ("My next guitar lesson is {when} and I've practised {song} all week.", "That will show."),
        ],
        {"song": ["Blackbird", "Wonderwall", "a blues in E", "Tears in Heaven", "Layla"]},
    ),
    "climbing": Hobby(
        2,
        [
            [
                (
                    "I went bouldering {when} and finally sent the {grade} problem I'd been stuck on.",
                    "Congratulations, that's a big step.",
                ),
                (
                    "Sending that {grade} problem {when} felt great; my footwork is getting better.",
                    "Good footwork is half of climbing.",
                ),
            ],
            [
                (
                    "At the climbing gym {when} I fell off the same {grade} route five times.",
                    "Watching others climb a problem often shows the beta.",
                ),
                (
                    "My fingers are still sore from the {grade} route that beat me {when}.",
                    "Rest your fingers between sessions; tendons adapt slowly.",
                ),
            ],
        ],
        [
            ("I'm going bouldering {when} to try a {grade} problem.", "Warm up well before hard moves."),
            ("The climbing gym set new {grade} routes and I'm going {when}.", "New routes keep it fun."),
        ],
        {"grade": ["V3", "V4", "V4", "V5", "V4", "V5"]},
    ),
}
DOG = Hobby(
    6,
    [
        [
            ("We walked {dog} along {place} {when} for an hour.", "Long walks keep dogs calm at home."),
            ("{dog} played with another dog on our walk {when}.", "Dogs love company."),
        ],
        [
            (
                "{dog} did well at puppy class {when}; she finally sits when asked.",
                "Positive reinforcement works well for training dogs.",
            ),
        ],
        [
            ("{dog} chewed my shoes {when} while I was out.", "Dogs chew when bored; puzzle toys can help."),
            ("I bought {dog} a puzzle toy after the shoes {when}.", "That should keep her busy."),
        ],
    ],
    [
        ("I'm taking {dog} to puppy class {when}.", "Bring her favourite treats."),
        ("We'll take {dog} for a long walk along {place} {when}.", "Enjoy the walk."),
    ],
    {},
)
# Said in any session: small talk that holds on any day, each at most once a day. All of it is short
# enough for the extractive writer to set aside as small talk (memstream.consumers.extractive.is_trivial), so
# repeated small talk does not become an episode or a fact.
CHITCHAT = [
    ("Grey day here.", "A grey day is a good day for a slow evening."),
    ("What a day.", "Sounds like a lot. Want to talk about it?"),
    ("Long week, honestly.", "Take it easy tonight."),
    ("One moment, doorbell.", "No problem, take your time."),
    ("Back again!", "Welcome back."),
    ("Coffee time here.", "Enjoy it!"),
]
FOLLOW_UPS = [
    ("Any other tips?", "Take it one step at a time and write down what works."),
    ("Sounds reasonable?", "It sounds reasonable, yes."),
    ("Thanks, that's helpful!", "Glad to help!"),
    ("Good to know.", "Happy to help."),
]
# the assistant's second sentence after a topic line: what keeps one week's exchange from repeating
# another's verbatim
ASIDES = [
    "Tell me how it goes.",
    "Keep me posted.",
    "Anything I can help you plan?",
    "Let me know if you want ideas.",
    "What's next on your list?",
    "I'll remember that.",
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
        move_day=start + timedelta(days=round(days * rng.uniform(0.45, 0.6))),
        employer=employer,
        role=rng.choice(ROLES),
        new_employer=new_employer if rng.random() < 0.75 else None,
        job_day=_next(0, start + timedelta(days=round(days * rng.uniform(0.5, 0.8)) - 1)),  # a Monday
        hobbies=hobbies,
        dog=rng.choice(DOGS) if rng.random() < 0.5 else None,
        seed=rng.getrandbits(32),
    )


def _city(p: Persona, said: date) -> str:
    return p.home if said < p.move_day else p.new_home


def _moving(p: Persona, said: date) -> list[Slot]:
    """The move, as it stands on ``said``: where they live and the plan, the days before it, or after.

    Until the move day the user says where they live, in one of several wordings, in the old city; from
    it on, in the new one. The extractive writer reads "I live in X" as a fact and "now I live in Y" or
    "we moved to Y" as an update that supersedes it."""
    old, new, day = p.home, p.new_home, p.move_day
    near_old, near_new = CITIES[old], CITIES[new]
    to_move = (day - said).days
    if to_move > 7:
        return [
            [
                (
                    f"I live in {old}, in a small flat near {near_old}.",
                    f"{_capital(near_old)} is a nice spot.",
                ),
                (f"We live in {old}, near {near_old}.", "That sounds like a nice area."),
                (f"My partner and I live in {old}, close to {near_old}.", "That sounds like a nice area."),
                (f"I live in {old} with my partner, near {near_old}.", "A nice part of town."),
            ],
            [
                (
                    f"We're moving to {new} {when(day, said)}; my partner has a job offer there.",
                    f"{new} is a lovely city to move to.",
                )
            ],
            [
                (
                    f"We live in {old}, and our flat there is too small for two people working from home.",
                    "A bigger place makes working from home easier.",
                ),
                (
                    f"We live in {old}; the rent there went up again this year.",
                    "Rents are rising in many cities.",
                ),
            ],
        ]
    if to_move > 0:
        movers = when(day, said)
        left = "one day" if to_move == 1 else f"{_number(to_move)} days"
        return [
            [(f"Only {left} left in {old} before the movers come.", "Use the time to say goodbye.")],
            [
                (
                    f"We're moving to {new} {movers} and I still have to pack the kitchen.",
                    "Keep a box of essentials for the first night.",
                )
            ],
            [
                (
                    f"We signed the lease for a flat in {new}; the movers come {movers}.",
                    "Label boxes by room, it saves hours.",
                )
            ],
        ]
    visit = _next(5, day + timedelta(days=28))  # a friend from the old city comes, once
    visiting = [
        (
            f"A friend from {old} visits us in {new} {when(visit, said)}."
            if said < visit
            else f"A friend from {old} visited us in {new} {when(visit, said)}.",
            "Visits from old friends are the best.",
        )
    ]
    if to_move > -21:
        slots = [
            [
                (f"Now I live in {new}, near {near_new}.", f"Enjoy {near_new}."),
                (f"Now we live in {new}, a short walk from {near_new}.", "A good place to settle in."),
            ],
            [_settling(p, said)],
        ]
        if -to_move >= 5:
            morning = f"Since the move to {new} I walk along {near_new} every morning."
            slots.append([(morning, "A good way to start the day.")])
        coffee = _next(6, day)  # the first Sunday in the new flat
        if said >= coffee:
            neighbours = f"Our new neighbours in {new} invited us for coffee {when(coffee, said)}."
            slots.append([(neighbours, "Nice neighbours make a new city feel like home.")])
        return slots + ([visiting] if (visit - said).days <= 14 else [])
    return [
        [
            (
                f"Now I live in {new}, close to {near_new}, and I don't miss {old} much.",
                "It sounds like the move was worth it.",
            ),
            (f"These days we live in {new}; life here is quieter than in {old}.", "Quiet can be a gift."),
        ],
        *([visiting] if abs((visit - said).days) <= 14 else []),
    ]


def _settling(p: Persona, said: date) -> tuple[str, str]:
    """How far the unpacking is, ``said`` after the move: one state a day, so it reads as progress
    rather than the same complaint for three weeks."""
    since = (said - p.move_day).days
    if since < 4:
        return (
            f"We moved to {p.new_home} {when(p.move_day, said)}; the flat is still full of boxes.",
            "Settling in takes a few weeks.",
        )
    done = p.move_day + timedelta(days=9)  # the last box, a week and a bit after the move
    if said < done:
        return (
            f"We moved to {p.new_home} {when(p.move_day, said)}; half the boxes are unpacked now.",
            "One room at a time.",
        )
    return (
        f"We unpacked the last box {when(done, said)}; the flat in {p.new_home} feels like home now.",
        "That's a milestone.",
    )


def _work(p: Persona, said: date) -> list[Slot]:
    """The job, as it stands on ``said``: the old one, the interview, the offer, or the new job."""
    new = p.new_employer
    to_start = (p.job_day - said).days
    project = PROJECTS[len(p.employer) % len(PROJECTS)]
    if new is None or to_start > 28:
        lines = [
            (
                f"I work at {p.employer} as a {p.role}, and the team is great.",
                "A good team makes all the difference.",
            ),
            (
                f"My manager at {p.employer} wants me to lead the {project} project.",
                "A great chance to grow.",
            ),
            (
                f"The {project} release at {p.employer} slipped again {when(_last(4, said), said)}.",
                "Releases slip; a smaller scope helps.",
            ),
        ]
    elif to_start > 14:
        interview = p.job_day - timedelta(days=19)  # a Wednesday
        lines = [
            (
                f"I have a job interview at {new} {when(interview, said)} for a {p.role} role."
                if said < interview
                else f"The interview at {new} {when(interview, said)} went well; they asked about Kafka.",
                "Prepare questions about the team you'd join.",
            ),
            (
                f"I'm nervous about leaving {p.employer} after five years.",
                "Change is scary, but it sounds exciting.",
            ),
        ]
    elif to_start > 0:
        lines = [
            (
                f"{new} offered me the {p.role} job! I start {when(p.job_day, said)}.",
                "Congratulations on the offer!",
            ),
            (
                f"I handed in my notice at {p.employer}; my first day at {new} is {when(p.job_day, said)}.",
                "Leave on good terms; people meet again.",
            ),
        ]
    else:
        lines = [
            (f"Now I work at {new}, as a {p.role} on the payments team.", "Sounds like a good fit."),
            (
                f"I started at {new} {when(p.job_day, said)} and I like my team.",
                "The first months are the steepest.",
            ),
        ]
    return [[line] for line in lines]


def _hobby(hobby: Hobby, p: Persona, said: date) -> list[Slot]:
    """The story of the hobby's last occurrence (past tense) and the plans for its next one."""
    lines: list[Line] = []
    for event, past in ((_last(hobby.weekday, said), True), (_next(hobby.weekday, said), False)):
        # One occurrence has one story, one song, one distance: the same in every turn about it. The
        # values go round week by week, so one lesson's song is not the next one's too.
        week = event.toordinal() // 7 + p.seed
        values = {k: v[week % len(v)] for k, v in hobby.fill.items()}
        story = random.Random(f"{p.seed}/{hobby.weekday}/{event}").choice(hobby.stories)
        for text, reply in story if past else hobby.plans:
            said_text = text.format(
                when=when(event, said), place=CITIES[_city(p, event)], dog=p.dog, **values
            )
            lines.append((_capital(said_text), reply))
    return [[line] for line in lines]


def _topics(p: Persona) -> dict[str, Callable[[Persona, date], list[Slot]]]:
    topics: dict[str, Callable[[Persona, date], list[Slot]]] = {"moving": _moving, "work": _work}
    for name in p.hobbies:
        topics[name] = partial(_hobby, HOBBIES[name])
    if p.dog is not None:
        topics["dog"] = partial(_hobby, DOG)
    return topics


def _weight(p: Persona, topic: str, said: date) -> int:
    # A move fills the weeks around it: the user talks about it more often then. A hobby comes up
    # most in the two days after it happened ("what I did at the weekend" on a Monday).
    if topic != "moving":
        hobby = DOG if topic == "dog" else HOBBIES.get(topic)
        return 3 if hobby is not None and 1 <= (said.weekday() - hobby.weekday) % 7 <= 2 else 1
    to_move = (p.move_day - said).days
    return 6 if 7 < to_move <= 35 else 3 if -21 <= to_move <= 7 else 1


def _session(slots: list[Slot], n: int, said_today: set[str], rng: random.Random) -> list[Line]:
    """Up to ``n`` exchanges: the topic's lines of the day, opening the session, with a follow-up or
    small talk now and then. Nothing is said twice in a day, so a second session on the same topic
    says what the first did not, in other words, or nothing (then there is no session)."""
    fresh = [[line for line in slot if line[0] not in said_today] for slot in rng.sample(slots, len(slots))]
    todo = [rng.choice(slot) for slot in fresh if slot]
    if not todo:
        return []
    extras = [
        e for e in rng.sample(FOLLOW_UPS + CHITCHAT, len(FOLLOW_UPS + CHITCHAT)) if e[0] not in said_today
    ]
    out: list[Line] = []
    n = min(n, len(todo) + 2)  # a session is about its topic: small talk is a small part of it
    while len(out) < n and (todo or extras):
        if todo and (not out or not extras or rng.random() < 0.75):
            text, reply = todo.pop()
            out.append((text, f"{reply} {rng.choice(ASIDES)}"))
        else:
            out.append(extras.pop())
    said_today.update(text for text, _ in out)
    return out


def generate(
    users: int = 5,
    days: int = 45,
    *,
    tenant: str = DEFAULT_TENANT,
    start: datetime = datetime(2025, 1, 6, 9, 0),
    seed: int = 7,
) -> Iterator[Turn]:
    """Turns in per-user time order; users interleave day by day like real traffic."""
    rng = random.Random(seed)
    personas = [_persona(i, days, start.date(), rng) for i in range(users)]
    for day in range(days):
        for p in personas:
            if rng.random() < 0.35:  # not every user talks every day
                continue
            first_hour = rng.randint(0, 6)
            topics = _topics(p)
            said = (start + timedelta(days=day)).date()
            names = sorted(topics)
            said_today: set[str] = set()
            for s in range(rng.choice([1, 1, 2])):
                # A second session starts 6 h after the first: a user's turns arrive in time order, and
                # every session ends before midnight (15:59 + 6 h + 16 min), on the day its lines speak from.
                ts = start + timedelta(days=day, hours=first_hour + 6 * s, minutes=rng.randint(0, 59))
                session_id = f"{p.user_id}-d{day}-s{s}"
                topic = rng.choices(names, [_weight(p, n, said) for n in names])[0]
                exchanges = _session(topics[topic](p, said), rng.randint(4, 9), said_today, rng)
                for t, (text, reply) in enumerate(exchanges):
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
