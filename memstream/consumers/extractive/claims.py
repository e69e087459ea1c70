"""Claims: what a first-person sentence says about its speaker, as (type, predicate, object).

A fixed list of patterns, tried in priority order; the object is cut to its clause and told in
the third person ("my own studio" -> "their own studio").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from memstream.consumers.extractive.sentences import (
    INTERJECTIONS,
    WORD,
    Sentence,
    is_question,
    mentions,
    word_set,
)
from memstream.schemas.memory import FactType

OBJECT_WORDS = 8  # a triple's object is a short phrase, not the rest of the sentence

# Speakers whose first-person statements are not facts about a person ("I can help with that").
NOT_SUBJECTS = frozenset({"assistant", "ai", "bot", "system"})

# The claims a profile or persona keeps: who a person is, what they like, and changes to those.
TRAITS = frozenset({FactType.PREFERENCE, FactType.ENTITY_RELATION, FactType.TIME_UPDATE})


@dataclass(frozen=True)
class Claim:
    """What a first-person sentence says about its speaker."""

    fact_type: FactType
    predicate: str
    object: str


@dataclass(frozen=True)
class _Rule:
    fact_type: FactType
    pattern: re.Pattern[str]
    build: Callable[[re.Match[str]], tuple[str, str] | None]  # -> (predicate, raw object) or None


def collapse(text: str) -> str:
    return " ".join(text.lower().replace("’", "'").split())


_IRREGULAR_PAST = word_set(
    "been went gone ran took taken made saw seen met got gotten gave given had found bought read "
    "wrote written did done won lost built drove driven flew flown ate eaten began begun left kept "
    "brought taught caught sold sent spent came became chose chosen drew drawn grew grown held knew "
    "known led paid rode sang sung sat slept spoke spoken stood swam threw thrown wore worn woke hung "
    "shot fell fallen fought hid hidden put set cut hit let quit shut forgot forgotten broke broken "
    "stole tore dug fed lent lit sought shook spun stuck swept wept"
)
# Verbs that say nothing about the speaker ("I think", "I guess"), auxiliaries, negations.
_NOT_ACTIONS = word_set(
    "am are was were is be do does did don't didn't doesn't can can't could couldn't should shouldn't "
    "would wouldn't will won't might must may shall think thought feel felt guess know knew mean "
    "meant agree agreed wonder bet believe appreciate understand see hope wish suppose say said not "
    "never to the a an so just really totally also last haven't hadn't wasn't weren't isn't aren't"
)
_NOT_PROGRESSIVE = word_set("feeling doing thinking wondering kidding saying hoping loving being")
_PARTICLE = r"to|at|in|on|with|for|from|into|about|up|out|off|by|over|through|around|back"
_FIRST = r"\b(?:i|we)"
_BE = r"(?:'m|'re|\s+am|\s+are)"
_ADV = (
    r"(?:\s+(?:just|recently|finally|also|really|actually|totally|absolutely|still|already|even|"
    r"definitely|truly|now|kinda|always|usually|often|currently|seriously|both|all))*"
)
_REST = r"\s+(?P<obj>.+)"
_RELATIVES = (
    r"(?:friend|sister|brother|sibling|mom|mother|dad|father|parent|husband|wife|partner|spouse|boyfriend|"
    r"girlfriend|fianc[ée]e?|son|daughter|kid|child|children|baby|grandma|grandmother|grandpa|grandfather|"
    r"aunt|uncle|cousin|niece|nephew|dog|cat|puppy|kitten|pet|boss|coworker|colleague|roommate|"
    r"neighbou?r|mentor|therapist)s?"
)
_NAME = r"(?-i:[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)"

_PLANS = {
    "going to": "plans to", "gonna": "plans to", "planning to": "plans to", "planning on": "plans to",
    "thinking about": "plans to", "thinking of": "plans to", "about to": "plans to", "aiming to": "plans to",
    "'ll": "plans to", "will": "plans to", "plan to": "plans to", "intend to": "plans to",
    "aim to": "plans to", "hoping to": "hopes to", "hope to": "hopes to",
    "looking forward to": "looks forward to", "excited to": "looks forward to",
    "can't wait to": "looks forward to", "trying to": "is trying to", "off to": "is off to",
    "want to": "wants to", "wanna": "wants to", "'d like to": "wants to", "would like to": "wants to",
    "'d love to": "wants to", "would love to": "wants to", "need to": "needs to",
}  # fmt: skip
LIKES = {
    "love": "loves", "like": "likes", "enjoy": "enjoys", "prefer": "prefers", "hate": "hates",
    "dislike": "dislikes", "adore": "adores", "can't stand": "can't stand", "cannot stand": "can't stand",
    "don't like": "dislikes", "do not like": "dislikes", "don't mind": "doesn't mind",
}  # fmt: skip
# Single-valued slots: a TIME_UPDATE with one of these predicates supersedes the current facts of
# the same slot. Other predicates never supersede: one can start, join or love many things at once.
FAMILIES = {
    "lives in": "residence", "lives at": "residence", "moved to": "residence", "moved into": "residence",
    "moved back to": "residence", "relocated to": "residence",
    "works at": "work", "works for": "work", "works as": "work", "started working at": "work",
}  # fmt: skip


def _third_person(verb: str) -> str:
    irregular = {"have": "has", "do": "does", "go": "goes", "be": "is"}
    if verb in irregular:
        return irregular[verb]
    if verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        return f"{verb}es"
    if verb.endswith("y") and len(verb) > 1 and verb[-2] not in "aeiou":
        return f"{verb[:-1]}ies"
    return f"{verb}s"


def _is_past(verb: str) -> bool:
    return verb.endswith("ed") or verb in _IRREGULAR_PAST


def _plan(m: re.Match[str]) -> tuple[str, str]:
    verb = collapse(m["verb"])
    if verb == "going to" and re.match(r"(?:the|a|an|my|our|his|her|their)\b", m["obj"], re.I):
        return "is going to", m["obj"]  # a place, not a plan to do something
    if _PLANS[verb] == "plans to" and re.match(r"[a-z]+ing\b", m["obj"], re.I):
        return "plans on", m["obj"]  # "thinking about going camping": plans on going camping
    return _PLANS[verb], m["obj"]


def _like(m: re.Match[str]) -> tuple[str, str]:
    return LIKES[collapse(m["verb"])], m["obj"]


def _state(m: re.Match[str]) -> tuple[str, str]:
    verb = re.sub(r"\b(?:big|huge) ", "", collapse(m["verb"]))
    return f"is {verb}", m["obj"]


def _favourite(m: re.Match[str]) -> tuple[str, str]:
    return f"favourite {collapse(m['noun'])} is", m["obj"]


def _relation(m: re.Match[str]) -> tuple[str, str] | None:
    if m["obj"].lower() in ENGLISH_STOP_WORDS:
        return None
    return f"has {collapse(m['verb'])}", m["obj"]


def _has(m: re.Match[str]) -> tuple[str, str]:
    return "has", m["obj"]


def _place(obj: str) -> str:
    # Where one lives, works or moved to ends before what comes with it: "Boston for a new job".
    return re.split(r"\s(?:with|for|because|after|before|since)\s", obj, maxsplit=1, flags=re.I)[0]


def _moved(m: re.Match[str]) -> tuple[str, str]:
    verb = collapse(m["verb"])
    return verb, (_place(m["obj"]) if verb.startswith(("moved", "relocated")) else m["obj"])


def _present(m: re.Match[str]) -> tuple[str, str]:
    verb, *rest = collapse(m["verb"]).split()
    return " ".join([verb if _is_past(verb) else _third_person(verb), *rest]), _place(m["obj"])


def _identity(m: re.Match[str]) -> tuple[str, str] | None:
    verb = collapse(m["verb"])
    if verb == "from":
        return "is from", m["obj"]
    if WORD.findall(m["obj"].lower())[:1] in (["bit"], ["little"], ["lot"]):
        return None  # "I'm a bit tired": a mood, not an identity
    return "is", f"{m['verb']} {m['obj']}"


def _progressive(m: re.Match[str]) -> tuple[str, str] | None:
    verb = collapse(m["verb"])
    if verb in _NOT_PROGRESSIVE:
        return None
    particle = f" {collapse(m['prt'])}" if m["prt"] else ""
    return f"is {verb}{particle}", m["obj"]


def _action(m: re.Match[str]) -> tuple[str, str] | None:
    verb = collapse(m["verb"])
    if verb in _NOT_ACTIONS:
        return None
    particle = f" {collapse(m['prt'])}" if m["prt"] else ""
    perfect = collapse(m["perf"] or "").lstrip("'")
    if perfect:
        aux = "had" if perfect == "had" else "has"
        if _is_past(verb):
            return f"{aux} {verb}{particle}", m["obj"]
        return aux, f"{m['verb']}{particle} {m['obj']}"  # "I have two kids": have is the verb
    return (verb if _is_past(verb) else _third_person(verb)) + particle, m["obj"]


def _relative(m: re.Match[str]) -> tuple[str, str]:
    return "has", collapse(m["verb"])


def _rule(
    fact_type: FactType, pattern: str, build: Callable[[re.Match[str]], tuple[str, str] | None]
) -> _Rule:
    return _Rule(fact_type, re.compile(pattern, re.IGNORECASE), build)


# In priority order: the first rule that yields a claim wins.
_RULES = (
    # a state that changed at a time
    _rule(
        FactType.TIME_UPDATE,
        rf"{_FIRST}(?:'ve|\s+have)?{_ADV}\s+(?P<verb>moved(?:\s+back)?(?:\s+(?:to|into|from|in\s+with))?|"
        r"relocated\s+to|started|quit|joined|changed|switched\s+to|left|stopped|retired(?:\s+from)?|"
        rf"graduated(?:\s+from)?|got\s+a\s+new)\b{_REST}",
        _moved,
    ),
    # preferences and constraints
    _rule(
        FactType.PREFERENCE,
        rf"{_FIRST}{_ADV}\s+(?P<verb>love|like|enjoy|prefer|hate|dislike|adore|can't\s+stand|"
        rf"cannot\s+stand|don't\s+like|do\s+not\s+like|don't\s+mind)\b{_REST}",
        _like,
    ),
    _rule(
        FactType.PREFERENCE,
        rf"{_FIRST}{_BE}{_ADV}\s+(?P<verb>allergic\s+to|into|(?:a\s+)?(?:big\s+|huge\s+)?fan\s+of|"
        r"keen\s+on|passionate\s+about|obsessed\s+with|crazy\s+about|afraid\s+of|scared\s+of|"
        rf"not\s+a\s+fan\s+of|not\s+into)\b{_REST}",
        _state,
    ),
    _rule(
        FactType.PREFERENCE,
        r"\bmy\s+(?:all-time\s+)?fav(?:ou?rite|e)?\s+(?P<noun>[\w-]+(?:\s+[\w-]+)?)\s+"
        rf"(?:is|are|was|has\s+to\s+be|would\s+be){_REST}",
        _favourite,
    ),
    # plans
    _rule(
        FactType.USER_EVENT,
        rf"{_FIRST}{_BE}{_ADV}\s+(?P<verb>going\s+to|gonna|planning\s+(?:to|on)|thinking\s+(?:about|of)|"
        r"hoping\s+to|about\s+to|looking\s+forward\s+to|excited\s+to|aiming\s+to|trying\s+to|off\s+to)\b"
        + _REST,
        _plan,
    ),
    _rule(
        FactType.USER_EVENT,
        rf"{_FIRST}(?P<verb>'ll|\s+will|\s+plan\s+to|\s+intend\s+to|\s+want\s+to|\s+wanna|\s+hope\s+to|"
        r"'d\s+like\s+to|\s+would\s+like\s+to|'d\s+love\s+to|\s+would\s+love\s+to|\s+need\s+to|\s+aim\s+to|"
        rf"\s+can't\s+wait\s+to)\b{_ADV}{_REST}",
        _plan,
    ),
    _rule(
        FactType.USER_EVENT,
        rf"^(?P<verb>gonna|going\s+to|planning\s+to|hoping\s+to|can't\s+wait\s+to)\b{_REST}",
        _plan,
    ),
    # people and pets, by name
    _rule(
        FactType.ENTITY_RELATION,
        rf"\bmy\s+(?P<verb>(?:(?:best|close|old|little|big|older|younger)\s+)?{_RELATIVES}),?\s+"
        rf"(?:named\s+)?(?P<obj>{_NAME})\b",
        _relation,
    ),
    _rule(
        FactType.ENTITY_RELATION,
        rf"{_FIRST}(?:'ve|\s+have)(?:\s+got)?\s+(?:an?|one|two|three|\d+)\s+(?P<verb>{_RELATIVES})\s+"
        rf"(?:named|called)\s+(?P<obj>{_NAME})\b",
        _relation,
    ),
    _rule(
        FactType.ENTITY_RELATION,
        rf"{_FIRST}(?:'ve|\s+have)(?:\s+got)?\s+(?P<obj>(?:an?|one|two|three|four|five|\d+)\s+{_RELATIVES})\b",
        _has,
    ),
    # who the speaker is, where they live and work
    _rule(
        FactType.ENTITY_RELATION,
        rf"{_FIRST}{_ADV}\s+(?P<verb>live\s+(?:in|at|with|near)|work\s+(?:at|as|for|in|with)|"
        rf"study\s+(?:at|in)|grew\s+up\s+in|come\s+from|volunteer\s+(?:at|with|for))\b{_REST}",
        _present,
    ),
    _rule(FactType.ENTITY_RELATION, rf"{_FIRST}{_BE}{_ADV}\s+(?P<verb>an?|from)\s+(?P<obj>.+)", _identity),
    # anything else the speaker does or did
    _rule(
        FactType.USER_EVENT,
        rf"{_FIRST}{_BE}{_ADV}\s+(?P<verb>[a-z]+ing)(?:\s+(?P<prt>{_PARTICLE}))?\b{_REST}",
        _progressive,
    ),
    _rule(
        FactType.USER_EVENT,
        rf"{_FIRST}(?P<perf>'ve|\s+have|\s+had)?{_ADV}\s+(?P<verb>[a-z]+(?:'t)?)"
        rf"(?:\s+(?P<prt>{_PARTICLE}))?\b{_REST}",
        _action,
    ),
    # people and pets, unnamed: "my husband and kids"
    _rule(FactType.ENTITY_RELATION, rf"\bmy\s+(?P<verb>{_RELATIVES})\b", _relative),
)
_STARTS = re.compile(r"\b(?:i|we|my)\b", re.IGNORECASE)
_CLAUSE_END = re.compile(
    r"[,;:!?()\[\]\"“”→]|\.(?!\d)|\s[-–—]|[-–—]\s|\s(?:but|because|'cause|cause|which|who|since|although|though|"
    r"while|when|whereas|until|unless|so)\s|\s(?:and|so|but|then|that|after|before|if|as|where|what|how|why|"
    r"whether)\s+(?:i|i'm|i've|i'd|i'll|it|it's|we|they|he|she|you|that|this|there|my|[a-z]+ed)\b",
    re.IGNORECASE,
)
# A third-person statement of a first-person object: one rule everywhere, "my own studio" -> "their
# own studio". Second-person words name the other speaker, whom a statement cannot resolve.
_FIRST_PERSON = {
    "i": "they", "i'm": "they're", "i've": "they've", "i'd": "they'd", "i'll": "they'll", "me": "them",
    "my": "their", "mine": "theirs", "myself": "themselves", "we": "they", "we're": "they're",
    "we've": "they've", "us": "them", "our": "their", "ours": "theirs", "ourselves": "themselves",
}  # fmt: skip
_SECOND_PERSON = word_set("you you're you've you'd you'll your yours yourself yourselves ya")
# An object made only of these points at something the sentence does not name: "I painted this".
_VAGUE = word_set(
    "this that these those it them him her one ones something anything everything nothing stuff thing "
    "things lot lots some all both there here a an the so too more much again same kind sort way"
)
_POINTERS = word_set("this that these those it them")
_PARTICLES = word_set(_PARTICLE.replace("|", " ") + " after before during since while")
_LOOSE_ENDS = word_set(
    "and or with to for of at in on the a an my our so too as really very just from by about"
)


_BE_FORMS = word_set("is are was were")


def _one_clause(phrase: str) -> str:
    """``phrase`` up to an "and" that opens a new clause, one with its own verb: "a risotto and the
    whole family loved it" -> "a risotto"; "peanuts and shellfish" stays whole."""
    words = phrase.split()
    for i, word in enumerate(words):
        rest = [w.lower().strip(".!?'’") for w in words[i + 1 :]]
        if word.lower() == "and" and any(w in _BE_FORMS or _is_past(w) for w in rest):
            return " ".join(words[:i])
        if i > 0 and word.lower() in _BE_FORMS:  # "helping create a loving world is amazing"
            return " ".join(words[:i])
    return phrase


def _object(raw: str, expressions: Sequence[str]) -> str:
    """The object phrase: up to the end of its clause, without time expressions, at most OBJECT_WORDS
    words, loose function words trimmed; "" when nothing but function words is left."""
    cut = _CLAUSE_END.search(raw)
    phrase = _one_clause(raw[: cut.start()] if cut else raw)
    for expression in sorted(expressions, key=len, reverse=True):
        for m in reversed(mentions(phrase, expression)):
            phrase = phrase[: m.start()] + phrase[m.end() :]
    words = phrase.split()[:OBJECT_WORDS]
    while words and words[-1].lower() in _LOOSE_ENDS:
        words.pop()
    if not words or words[0].lower() in {"and", "or", "so", "then"}:
        return ""  # the verb had no object: "we bond and understand each other"
    bare = [w.lower().replace("’", "'").strip("'") for w in words]
    if all(w in ENGLISH_STOP_WORDS for w in bare) or all(w in _VAGUE for w in bare):
        return ""  # "I painted this", "I love it"
    if bare[0] in _POINTERS and (len(bare) == 1 or bare[1] in _LOOSE_ENDS or bare[1] in _PARTICLES):
        return ""  # "this after the storm": a pronoun, not "that lake sunrise"
    if any(w in _SECOND_PERSON for w in bare):
        return ""  # "I love your painting": about the other speaker
    return " ".join(_FIRST_PERSON.get(b, w) for w, b in zip(words, bare, strict=True))


def classify(text: str, expressions: Sequence[str] = ()) -> Claim | None:
    """The claim a first-person sentence makes about its speaker (None for anything else), with
    ``expressions`` (its time expressions) left out of the object."""
    if is_question(text):
        return None
    said = text.replace("’", "'")
    starts = [0, *(m.start() for m in _STARTS.finditer(said))]
    for rule in _RULES:
        for pos in starts:
            m = rule.pattern.match(said, pos)
            if m and rule.build is _relative and not _opens(said[:pos]):
                continue  # "thankful for my friends" says nothing of who they are; "My kids are ..." does
            built = rule.build(m) if m else None
            if built is None:
                continue
            predicate, raw = built
            obj = _object(raw, expressions)
            if obj:
                fact_type = rule.fact_type
                if fact_type is FactType.ENTITY_RELATION and re.search(r"\bnow\b", said, re.I):
                    fact_type = FactType.TIME_UPDATE  # "now I live in Boston"
                return Claim(fact_type, predicate, obj)
    return None


def _opens(prefix: str) -> bool:
    """Nothing but interjections before this point: "Yeah, my kids ..." opens with "my kids"."""
    return all(w.lower() in INTERJECTIONS for w in WORD.findall(prefix))


def has_subject(s: Sentence) -> bool:
    return s.speaker is not None and s.speaker.lower() not in NOT_SUBJECTS
