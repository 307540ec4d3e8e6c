"""A toy research world that runs on a CPU: invented people, their pages, questions that need search then visit,
and trajectories written by a scripted oracle through the real agent loop, tools and journal.

    venus-edge train toy-world OUT [--people 80] [--seed 0]

writes ``OUT/corpus/`` (one Markdown page per person), ``OUT/questions-train.jsonl`` and
``OUT/questions-heldout.jsonl`` (the held-out questions ask about people no training question is about, whose names
pair a first name and a surname that training people carry), and
``OUT/trajectories.jsonl``: one journal session per training question, run by ``Agent`` with the corpus's
``search`` and extractive ``visit`` tools, as ``venus-edge research --corpus OUT/corpus --extractive-visit`` runs them.

The world is built so that tools are needed:

- a page opens with a paragraph that names the person and a neighbour (a distractor: searching a name also finds
  the neighbours' pages), and gives the facts (birth town and year, trade, mentor) only after it, past the
  240-character search snippet, so an answer is in the page body and not in the search results;
- one-hop questions ask a fact of a person; two-hop questions ask a fact of a person's mentor, whose name is only
  on the person's page (search, visit, search the mentor, visit, answer).

The oracle reads every observation as the model would (the search results' titles and URLs, the fact sentences of
the visited page, which it quotes before it uses a fact); when an observation does not hold what it needs, it gives
up and the session is not a sample.

With ``--detour-share S`` (default 0) the oracle is an imperfect demonstrator, as open research trajectories are: in
a share S of its sessions (drawn per question from the seed) its first visit opens the top search result that is
not the subject's page (a neighbour or a namesake), says so, then opens the subject's page. The choice is made in
the visit call's URL after the same reasoning, so a model fine-tuned on these sessions opens a wrong page with
probability about S: an error in a research turn, which information-gain rewards can single out (issue 11).
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from venus_edge.jsonl import iter_records
from venus_edge.protocol import IM_END, IM_START, TOOL_RESPONSE_CLOSE, TOOL_RESPONSE_OPEN, protocol_style
from venus_edge.train.errors import OracleGaveUp

__all__ = ["Person", "ToyQuestion", "ToyWorld", "generate_world", "oracle_policy", "research_errors",
           "run_oracle"]

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kl", "st", "th")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "eo")
_CODAS = ("", "n", "r", "l", "s", "th", "k", "m")
TRADES = ("cartographer", "glassblower", "beekeeper", "ferryman", "bookbinder", "clockmaker", "weaver", "astronomer",
          "stonemason", "herbalist", "lamplighter", "shipwright")
QUESTIONS = {
    "town": "In which town was {name} born?",
    "year": "In which year was {name} born?",
    "trade": "What was the trade of {name}?",
    "town2": "In which town was the mentor of {name} born?",
    "trade2": "What was the trade of the mentor of {name}?",
}
GOALS = {"town": "where {name} was born", "year": "the year {name} was born", "trade": "the trade of {name}",
         "mentor": "who the mentor of {name} was"}
_FACT_PATTERNS = {
    "town": re.compile(r"born in ([A-Z][a-z]+) in \d{4}"),
    "year": re.compile(r"born in [A-Z][a-z]+ in (\d{4})"),
    "trade": re.compile(r"By trade they were an? ([a-z]+)"),
    "mentor": re.compile(r"mentor was ([A-Z][a-z]+ [A-Z][a-z]+)"),
    "name": re.compile(r"^# ([A-Z][a-z]+ [A-Z][a-z]+)$", re.MULTILINE),
}
#: The sentence of the page that states each fact; the oracle quotes it before using the fact, as a researcher
#: quotes evidence (and so the fact is copied from the quote, a few tokens back, rather than from the page).
_SENTENCES = {
    "town": re.compile(r"They were born in [A-Z][a-z]+ in \d{4}\."),
    "year": re.compile(r"They were born in [A-Z][a-z]+ in \d{4}\."),
    "trade": re.compile(r"By trade they were an? [a-z]+\."),
    "mentor": re.compile(r"Their mentor was [A-Z][a-z]+ [A-Z][a-z]+\."),
}


def _slug(name: str) -> str:
    """The corpus file stem of a person's page."""
    return name.lower().replace(" ", "-")


@dataclass(frozen=True)
class Person:
    """An invented person; ``mentor`` is another person's name (None for the first generation)."""

    name: str
    town: str
    year: int
    trade: str
    mentor: str | None
    neighbour: str

    @property
    def slug(self) -> str:
        return _slug(self.name)

    def page(self) -> str:
        """The person's page: an opening paragraph naming them and a neighbour, then the facts."""
        mentor = f" Their mentor was {self.mentor}." if self.mentor else " They had no mentor."
        return (
            f"# {self.name}\n\n"
            f"{self.name} appears in the Almanac of the Quiet Valleys, the register kept by the valley scribes. "
            f"The almanac lists {self.name} in the same chapter as {self.neighbour}, a neighbour from the valleys. "
            f"The scribes wrote this entry from letters, ledgers and parish records.\n\n"
            f"## Life\n\nThey were born in {self.town} in {self.year}. By trade they were a {self.trade}.{mentor}\n"
        )


@dataclass(frozen=True)
class ToyQuestion:
    """A question with its answer; ``kind`` is a key of ``QUESTIONS`` (two-hop kinds end in 2)."""

    id: str
    kind: str
    subject: str
    question: str
    answer: str

    @property
    def hops(self) -> int:
        return 2 if self.kind.endswith("2") else 1

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "answer": self.answer, "kind": self.kind,
                "subject": self.subject}


@dataclass(frozen=True)
class ToyWorld:
    """The generated world: its people, the corpus folder, and the train / held-out questions."""

    people: tuple[Person, ...]
    corpus: Path
    train: tuple[ToyQuestion, ...]
    heldout: tuple[ToyQuestion, ...]


def _word(rng: random.Random, syllables: int) -> str:
    syllable_texts = (rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables))
    return "".join(syllable_texts).capitalize()


def _distinct_words(rng: random.Random, count: int, syllables: tuple[int, ...],
                    avoid: frozenset[str] | set[str] = frozenset()) -> list[str]:
    words: list[str] = []
    while len(words) < count:
        word = _word(rng, rng.choice(syllables))
        if word not in words and word not in avoid and len(word) <= 12:
            words.append(word)
    return words


def _heldout_people(shuffled: Sequence[Person], count: int) -> list[Person]:
    """The first ``count`` people whose first name and surname each stay on some other person (training side)."""
    uses: dict[str, int] = {}
    for person in shuffled:
        for part in person.name.split(" "):
            uses[part] = uses.get(part, 0) + 1
    chosen: list[Person] = []
    for person in shuffled:
        parts = person.name.split(" ")
        if len(chosen) < count and all(uses[part] > 1 for part in parts):
            chosen.append(person)
            for part in parts:
                uses[part] -= 1
    return chosen


def generate_world(out_dir: str | Path, *, people: int = 80, seed: int = 0, heldout_share: float = 0.25) -> ToyWorld:
    """Write the corpus and question files of a world of ``people`` invented people under ``out_dir``.

    Returns:
        the world. The same seed writes the same files.

    Raises:
        ValueError: fewer than 8 people, or a held-out share outside (0, 1).
    """
    if people < 8 or not 0 < heldout_share < 1:
        raise ValueError("a world needs at least 8 people and a held-out share between 0 and 1")
    rng = random.Random(seed)
    # Names and towns come from closed pools: a held-out person's name is a new pairing of a first name and a
    # surname that training people also carry, so a model can learn to copy names instead of memorizing people.
    pool = max(6, math.isqrt(3 * people))
    firsts = _distinct_words(rng, pool, (1, 2))
    lasts = _distinct_words(rng, pool, (2,), avoid=set(firsts))
    names = rng.sample([f"{first} {last}" for first in firsts for last in lasts], people)
    towns = _distinct_words(rng, max(6, people // 10), (2,), avoid=set(firsts) | set(lasts))
    persons = []
    for index, name in enumerate(names):
        mentor = names[rng.randrange(index)] if index >= people // 5 else None
        neighbour = names[rng.choice([i for i in range(people) if i != index])]
        persons.append(
            Person(name, rng.choice(towns), rng.randrange(1700, 1900), rng.choice(TRADES), mentor, neighbour)
        )
    by_name = {p.name: p for p in persons}
    folder = Path(out_dir)
    corpus = folder / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for person in persons:
        (corpus / f"{person.slug}.md").write_text(person.page(), encoding="utf-8")
    subjects = list(persons)
    rng.shuffle(subjects)
    split = {"heldout": _heldout_people(subjects, max(1, round(len(subjects) * heldout_share)))}
    split["train"] = [p for p in subjects if p not in split["heldout"]]
    questions: dict[str, list[ToyQuestion]] = {}
    for part, group in split.items():
        questions[part] = []
        for person in group:
            for kind in QUESTIONS:
                mentor_person = by_name.get(person.mentor or "")
                if kind.endswith("2") and mentor_person is None:
                    continue
                target = mentor_person if kind.endswith("2") else person
                answer = str(getattr(target, kind.rstrip("2")))
                qid = f"toy-{person.slug}-{kind}"
                question = QUESTIONS[kind].format(name=person.name)
                questions[part].append(ToyQuestion(qid, kind, person.name, question, answer))
        rng.shuffle(questions[part])
        path = folder / f"questions-{part}.jsonl"
        path.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in questions[part]), encoding="utf-8")
    return ToyWorld(tuple(persons), corpus, tuple(questions["train"]), tuple(questions["heldout"]))


def _messages(prompt: str) -> list[tuple[str, str]]:
    """(role, content) of each ChatML message of a rendered prompt (the open generation prompt left out)."""
    found = []
    for chunk in prompt.split(IM_START)[1:]:
        role, _, rest = chunk.partition("\n")
        if IM_END in rest:
            found.append((role, rest.split(IM_END)[0]))
    return found


def _call(reasoning: str, name: str, arguments: dict[str, Any]) -> str:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{reasoning}\n</think>\n\n<tool_call>\n{body}\n</tool_call>"


def _search_hits(observation: str) -> list[dict[str, Any]]:
    body = observation.removeprefix(TOOL_RESPONSE_OPEN).removesuffix(TOOL_RESPONSE_CLOSE).strip()
    try:
        blocks = json.loads(body)
    except json.JSONDecodeError:
        raise OracleGaveUp("the search result is not JSON") from None
    return [hit for block in blocks for hit in block.get("web_page_info_list", [])]


def _url_of(observation: str, name: str) -> str:
    for hit in _search_hits(observation):
        if hit.get("title") == name:
            return str(hit["url"])
    raise OracleGaveUp(f"no search result is the page of {name}")


def _other_hit(observation: str, name: str, avoid: frozenset[str] = frozenset()) -> tuple[str, str]:
    """(title, URL) of the top search result that is not the page of ``name`` nor of a name in ``avoid``."""
    for hit in _search_hits(observation):
        if hit.get("title") != name and hit.get("title") not in avoid:
            return str(hit["title"]), str(hit["url"])
    raise OracleGaveUp(f"every search result is the page of {name} or of a page the question needs")


def _fact(observation: str, fact: str) -> str:
    match = _FACT_PATTERNS[fact].search(observation)
    if match is None:
        raise OracleGaveUp(f"the page shows no {fact}")
    return match.group(1)


def _quote(observation: str, fact: str) -> str:
    match = _SENTENCES[fact].search(observation)
    if match is None:
        raise OracleGaveUp(f"the page shows no {fact}")
    return match.group(0)


def oracle_policy(question: ToyQuestion, *, detour: bool = False,
                  needed: frozenset[str] = frozenset()) -> Callable[[str], str]:
    """The next turn for ``question`` given the rendered prompt so far (``ScriptedEngine(turns=policy)``).

    Turn by turn: search the subject; visit the result titled with the subject's name; read the fact (one hop:
    answer) or the mentor's name (two hops: search the mentor, visit their page, read the fact, answer).
    Every turn's reasoning opens by restating what the question asks and says what this turn needs ("I need ...")
    before it acts: a small model then finds the goal in the turn before (an earlier "I need" to copy from), not
    only in the question hundreds of tokens back, behind the search results.
    ``detour``: the first visit opens the top result that is not the subject's page nor one of ``needed`` (the
    names of the other pages the question needs: a two-hop question's mentor, who may share the subject's first
    name), with the same reasoning; the next turn names whose page it was and opens the subject's (one more turn).
    """
    fact = question.kind.rstrip("2")
    subject = question.subject
    asks = GOALS[fact].format(name=subject if question.hops == 1 else f"the mentor of {subject}")
    first_goal = GOALS[fact if question.hops == 1 else "mentor"].format(name=subject)

    def next_turn(prompt: str) -> str:
        messages = _messages(prompt)
        done = sum(1 for role, _ in messages if role == "assistant")
        observation = messages[-1][1] if messages and messages[-1][0] == "user" else ""
        opening = f"The question asks {asks}."
        if done == 0:
            return _call(f"{opening} I need {first_goal}. I will search for {subject}.", "search",
                         {"query": [subject]})
        if done == 1:
            url = _other_hit(observation, subject, needed)[1] if detour else _url_of(observation, subject)
            return _call(f"{opening} The page of {subject} is in the results. I need {first_goal}. I will read it.",
                         "visit", {"url": [url], "goal": first_goal})
        if detour and done == 2:  # the extractive visit may leave out the wrong page's heading: its title is read
            results = messages[-3][1]  # from the search results
            opened = _other_hit(results, subject, needed)[0]
            return _call(f"{opening} This page is about {opened}, not {subject}. I need "
                         f"{first_goal}. I will read the page of {subject}.", "visit",
                         {"url": [_url_of(results, subject)], "goal": first_goal})
        done -= int(detour)
        if done == 2 and question.hops == 2:
            mentor = _fact(observation, "mentor")
            return _call(f"{opening} The page says: {_quote(observation, 'mentor')} So the mentor of {subject} was "
                         f"{mentor}. Now I need {GOALS[fact].format(name=mentor)}. I will search for {mentor}.",
                         "search", {"query": [mentor]})
        if done == 3 and question.hops == 2:
            mentor_match = _FACT_PATTERNS["mentor"].search(messages[-3][1] if len(messages) >= 3 else "")
            name = mentor_match.group(1) if mentor_match else ""
            goal = GOALS[fact].format(name=name)
            return _call(f"{opening} The page of {name} is in the results. I need {goal}. I will read it.", "visit",
                         {"url": [_url_of(observation, name)], "goal": goal})
        value = _fact(observation, fact)
        reader = subject if question.hops == 1 else _fact(observation, "name")
        return (f"{opening} I need {GOALS[fact].format(name=reader)}. The page says: {_quote(observation, fact)} "
                f"So the answer is {value}.\n</think>\n\n<answer>\n{value}\n</answer>")

    return next_turn


def run_oracle(questions: Sequence[ToyQuestion], corpus: Path, journal: Path, *, detour_share: float = 0.0,
               seed: int = 0, observation_style: str = "inference") -> tuple[int, int]:
    """Run the oracle on each question through ``Agent`` with the corpus's search and extractive visit tools,
    appending every session to ``journal``; returns (sessions answered correctly, sessions run).

    ``detour_share``: the share of sessions (drawn per question from ``seed``) whose first visit opens a wrong page
    (``oracle_policy(detour=True)``; never a page the question needs, read from the subject's page in ``corpus``).
    ``observation_style``: how the sessions' prompt and observations are written (``tools.observation_styles``:
    ``inference`` or ``rl``); the journal records it.

    Raises:
        ValueError: ``detour_share`` outside [0, 1].
    """
    if not 0.0 <= detour_share <= 1.0:
        raise ValueError(f"detour_share must be between 0 and 1, not {detour_share}")
    from venus_edge.agent import Agent, AgentConfig
    from venus_edge.testing import ScriptedEngine
    from venus_edge.toolbox import close_tools, default_tools

    style = protocol_style(observation_style).name  # an unknown style fails here, before any session
    tools = default_tools([corpus], observation_style=style)
    rng = random.Random(seed)
    correct = 0
    try:
        for question in questions:
            detour = rng.random() < detour_share
            engine = ScriptedEngine(turns=oracle_policy(question, detour=detour, needed=_needed_besides_subject(
                question, corpus) if detour else frozenset()))
            try:
                result = Agent(engine, tools, config=AgentConfig(max_turns=8, max_retries=1, observation_style=style),
                               trajectory_path=journal).run(question.question)
            except OracleGaveUp:  # the journal keeps the session without an end: cleaning skips it
                continue
            correct += int(result.answer is not None and result.answer.strip() == question.answer)
    finally:
        close_tools(tools)
    return correct, len(questions)


def _mentor_of(name: str, corpus: Path) -> str | None:
    """The mentor named on the page of ``name`` in ``corpus`` (None: no such page, or no mentor)."""
    page = corpus / f"{_slug(name)}.md"
    mentor = _FACT_PATTERNS["mentor"].search(page.read_text(encoding="utf-8")) if page.exists() else None
    return mentor.group(1) if mentor else None


def _needed_besides_subject(question: ToyQuestion, corpus: Path) -> frozenset[str]:
    """The mentor's name for a two-hop question (from the subject's page), else nothing."""
    mentor = _mentor_of(question.subject, corpus) if question.hops == 2 else None
    return frozenset({mentor}) if mentor else frozenset()


def research_errors(world_dir: str | Path, eval_dir: str | Path) -> dict[str, Any]:
    """How often evaluated sessions opened a page their question does not need, and what it cost them.

    Reads the world's ``questions-*.jsonl`` and corpus pages and the evaluation's ``results.jsonl`` and
    ``trajectories.jsonl`` (as ``venus-edge eval --out`` writes them). The pages a question needs are its subject's
    and, for a two-hop question, the subject's mentor's; a visit to any other page is a research error (a detour).

    Returns:
        ``sessions``; ``wrong_page_sessions``: sessions that opened at least one page not needed, and their share
        ``wrong_page_share``; ``accuracy_with_wrong_page`` and ``accuracy_without`` (None when no session is in
        the group).

    Raises:
        FileNotFoundError: a file is missing. KeyError: a result's question is not one of the world's.
    """
    world, evaluation = Path(world_dir), Path(eval_dir)
    subjects = {}
    for part in ("train", "heldout"):
        for row in _records(world / f"questions-{part}.jsonl"):
            subjects[row["question"]] = (row["subject"], row["kind"].endswith("2"))
    opened: dict[str, list[str]] = {}
    for record in _records(evaluation / "trajectories.jsonl"):
        call = record.get("tool_call") or {}
        if record.get("record") == "turn" and call.get("name") == "visit":
            urls = (call.get("arguments") or {}).get("url", [])
            opened.setdefault(record["session_id"], []).extend(urls if isinstance(urls, list) else [urls])
    groups: dict[bool, list[bool]] = {True: [], False: []}
    for result in _records(evaluation / "results.jsonl"):
        subject, two_hop = subjects[result["question"]]
        needed = {subject, _mentor_of(subject, world / "corpus")} if two_hop else {subject}
        slugs = {_slug(name) for name in needed if name}
        wrong = any(_page_stem(url) not in slugs for url in opened.get(result["session_id"], []))
        groups[wrong].append(bool(result["correct"]))
    sessions = len(groups[True]) + len(groups[False])

    def accuracy(outcomes: list[bool]) -> float | None:
        return round(sum(outcomes) / len(outcomes), 4) if outcomes else None

    return {"sessions": sessions, "wrong_page_sessions": len(groups[True]),
            "wrong_page_share": round(len(groups[True]) / sessions, 4) if sessions else None,
            "accuracy_with_wrong_page": accuracy(groups[True]), "accuracy_without": accuracy(groups[False])}


def _records(path: Path) -> list[dict[str, Any]]:
    """The readable records of a JSONL file the runtime wrote (a line torn by a killed run is skipped)."""
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    return [record for _, record, _, _ in iter_records(path) if isinstance(record, dict)]


def _page_stem(url: Any) -> str:
    """The corpus file stem a visit URL opens: the corpus tool ignores a query and a fragment and unquotes the path."""
    return unquote(urlsplit(str(url)).path).rsplit("/", 1)[-1].removesuffix(".md")
