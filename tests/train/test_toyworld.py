"""The toy research world: seeded, the facts only in page bodies, held-out subjects never asked in training, and
an oracle that reads its observations (and gives up when they lack what it needs)."""

from __future__ import annotations

import json

import pytest

from venus_edge.agent import Agent, AgentConfig
from venus_edge.testing import ScriptedEngine
from venus_edge.toolbox import default_tools
from venus_edge.train.toyworld import (
    OracleGaveUp,
    ToyQuestion,
    generate_world,
    oracle_policy,
    research_errors,
    run_oracle,
)


def test_the_same_seed_writes_the_same_world(tmp_path):
    first = generate_world(tmp_path / "a", people=12, seed=4)
    again = generate_world(tmp_path / "b", people=12, seed=4)
    other = generate_world(tmp_path / "c", people=12, seed=5)
    assert first.people == again.people != other.people
    first_questions = (tmp_path / "a" / "questions-train.jsonl").read_text()
    assert first_questions == (tmp_path / "b" / "questions-train.jsonl").read_text()


def test_facts_are_past_the_snippet_and_heldout_subjects_are_new(tmp_path):
    world = generate_world(tmp_path, people=20, seed=0)
    for person in world.people:
        page = (world.corpus / f"{person.slug}.md").read_text()
        assert page.index(f"born in {person.town}") > 240 and page.index(person.name) < 240
    assert {q.subject for q in world.train}.isdisjoint({q.subject for q in world.heldout})
    assert {q.hops for q in world.train} == {1, 2}
    by_name = {p.name: p for p in world.people}
    for question in world.heldout:
        person = by_name[question.subject]
        target = by_name[person.mentor] if question.hops == 2 else person
        assert question.answer == str(getattr(target, question.kind.rstrip("2")))


@pytest.mark.parametrize("people", [8, 40, 200])
def test_heldout_names_pair_parts_that_training_people_carry(tmp_path, people):
    world = generate_world(tmp_path, people=people, seed=1)
    trained_parts = {part for q in world.train for part in q.subject.split(" ")}
    heldout = {q.subject for q in world.heldout}
    assert heldout and all(set(name.split(" ")) <= trained_parts for name in heldout)
    assert len({p.name for p in world.people}) == people
    assert len({p.town for p in world.people}) <= max(6, people // 10)


def test_the_oracle_answers_through_the_real_loop_and_tools(tmp_path):
    world = generate_world(tmp_path, people=16, seed=2)
    questions = [q for q in world.train if q.hops == 2][:3] + [q for q in world.train if q.hops == 1][:3]
    correct, total = run_oracle(questions, world.corpus, tmp_path / "journal.jsonl")
    assert (correct, total) == (6, 6)
    records = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()]
    visits = [r["tool_call"]["arguments"]["url"] for r in records
              if r.get("tool_call", {}) and r["tool_call"]["name"] == "visit"]
    assert len(visits) == 3 * 2 + 3 and all(url[0].startswith("corpus://") for url in visits)


def test_every_oracle_turn_restates_the_question_and_says_what_it_needs(tmp_path):
    """The goal is restated in each turn, so a small model copies it from the turn before rather than from the
    question hundreds of tokens back; the visit goal and the final turn name the person whose fact is read."""
    world = generate_world(tmp_path, people=16, seed=2)
    question = next(q for q in world.train if q.kind == "trade2")
    mentor = next(p.mentor for p in world.people if p.name == question.subject)
    run_oracle([question], world.corpus, tmp_path / "journal.jsonl")
    records = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()]
    turns = [r for r in records if r.get("record") == "turn"]
    texts = [json.dumps(r) for r in turns]
    assert len(turns) == 5
    assert all(f"The question asks the trade of the mentor of {question.subject}." in text for text in texts)
    assert f"I need who the mentor of {question.subject} was" in texts[0]
    assert f"I need the trade of {mentor}" in texts[3]
    calls = [r["tool_call"] for r in turns if r.get("tool_call")]
    visit_goals = [call["arguments"]["goal"] for call in calls if call["name"] == "visit"]
    assert visit_goals == [f"who the mentor of {question.subject} was", f"the trade of {mentor}"]
    assert f"I need the trade of {mentor}. The page says: By trade they were" in texts[4]


def test_the_oracle_gives_up_when_a_page_lacks_the_fact(tmp_path):
    world = generate_world(tmp_path, people=12, seed=3)
    question = next(q for q in world.train if q.kind == "town")
    subject = next(p for p in world.people if p.name == question.subject)
    page = world.corpus / f"{subject.slug}.md"
    page.write_text(page.read_text().replace(" born in ", " living near "))
    tools = default_tools([world.corpus])
    with pytest.raises(OracleGaveUp, match="no town"):
        agent = Agent(ScriptedEngine(turns=oracle_policy(question)), tools, config=AgentConfig(max_turns=6))
        agent.run(question.question)
    assert run_oracle([question], world.corpus, tmp_path / "j.jsonl") == (0, 1)


def test_a_world_needs_people():
    with pytest.raises(ValueError, match="at least 8 people"):
        generate_world("/nonexistent", people=3)
    assert ToyQuestion("x", "town2", "A B", "q", "a").hops == 2


def test_a_detour_opens_a_wrong_page_with_the_same_reasoning_then_the_right_one(tmp_path):
    """An imperfect demonstration: the wrong choice is in the visit call's URL only, after the reasoning a direct
    session writes, so a model trained on both learns to open a wrong page with the detours' share."""
    world = generate_world(tmp_path, people=16, seed=2)
    question = next(q for q in world.train if q.kind == "town2")
    subject = next(p for p in world.people if p.name == question.subject)
    run_oracle([question], world.corpus, tmp_path / "direct.jsonl")
    assert run_oracle([question], world.corpus, tmp_path / "detour.jsonl", detour_share=1.0) == (1, 1)

    def turns(name):
        records = [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]
        return [r for r in records if r.get("record") == "turn"]

    direct, detour = turns("direct.jsonl"), turns("detour.jsonl")
    assert len(detour) == len(direct) + 1 == 6
    wrong, right = (turn["tool_call"]["arguments"]["url"][0] for turn in detour[1:3])
    assert right == f"corpus://corpus/{subject.slug}.md" != wrong
    assert direct[1]["tool_call"]["arguments"]["url"][0] == right
    assert detour[1]["content"].split("<tool_call>")[0] == direct[1]["content"].split("<tool_call>")[0]
    wrong_name = next(p.name for p in world.people if wrong.endswith(f"/{p.slug}.md"))
    assert f"This page is about {wrong_name}, not {subject.name}." in detour[2]["content"]
    assert [t["tool_call"] for t in detour[3:5]] == [t["tool_call"] for t in direct[2:4]]


def test_the_detour_share_is_drawn_per_question_from_the_seed(tmp_path):
    world = generate_world(tmp_path, people=16, seed=2)
    questions = [q for q in world.train if q.hops == 1][:20]

    def visits(name, **options):
        assert run_oracle(questions, world.corpus, tmp_path / name, **options) == (20, 20)
        records = [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]
        return sum(1 for r in records if (r.get("tool_call") or {}).get("name") == "visit")

    assert visits("none.jsonl") == 20
    assert visits("all.jsonl", detour_share=1.0) == 40
    half = visits("half.jsonl", detour_share=0.5, seed=1)
    assert 20 < half < 40 and visits("again.jsonl", detour_share=0.5, seed=1) == half
    with pytest.raises(ValueError, match="between 0 and 1"):
        run_oracle(questions, world.corpus, tmp_path / "bad.jsonl", detour_share=1.5)


def test_research_errors_count_the_sessions_that_opened_a_page_not_needed(tmp_path):
    world = generate_world(tmp_path / "world", people=16, seed=2)
    direct = [q for q in world.train if q.kind == "trade2"][:2] + [q for q in world.train if q.kind == "town"][:1]
    detoured = [q for q in world.train if q.kind == "year"][:2]
    evaluation = tmp_path / "eval"
    evaluation.mkdir()
    journal = evaluation / "trajectories.jsonl"
    run_oracle(direct, world.corpus, journal)
    run_oracle(detoured, world.corpus, journal, detour_share=1.0)
    starts = [json.loads(line) for line in journal.read_text().splitlines()]
    starts = [r for r in starts if r.get("record") == "start"]
    # graded by hand: one direct session wrong, one detoured session right
    correct = {starts[0]["session_id"]: False, starts[3]["session_id"]: True}
    (evaluation / "results.jsonl").write_text("".join(
        json.dumps({"question": r["question"], "session_id": r["session_id"], "correct": correct.get(r["session_id"],
                    r["question"] in {q.question for q in direct})}) + "\n" for r in starts))
    assert research_errors(world.corpus.parent, evaluation) == {
        "sessions": 5, "wrong_page_sessions": 2, "wrong_page_share": 0.4, "accuracy_with_wrong_page": 0.5,
        "accuracy_without": round(2 / 3, 4)}


def test_a_detour_never_opens_a_page_the_question_needs(tmp_path):
    # In this world some mentors share their mentee's first name: the top result that is not the subject's page is
    # then the mentor's, which the question needs (and cleaning would drop the later, real visit as a duplicate).
    world = generate_world(tmp_path, people=16, seed=1)
    two_hop = [q for q in world.train if q.hops == 2]
    mentors = {p.name: p.mentor for p in world.people}
    assert any(mentors[q.subject].split(" ")[0] == q.subject.split(" ")[0] for q in two_hop)
    assert run_oracle(two_hop, world.corpus, tmp_path / "j.jsonl", detour_share=1.0) == (len(two_hop), len(two_hop))
    records = [json.loads(line) for line in (tmp_path / "j.jsonl").read_text().splitlines()]
    visits: dict[str, list[str]] = {}
    for record in records:
        if (record.get("tool_call") or {}).get("name") == "visit":
            visits.setdefault(record["session_id"], []).extend(record["tool_call"]["arguments"]["url"])
    assert len(visits) == len(two_hop)
    for urls in visits.values():
        assert len(urls) == 3 and len(set(urls)) == 3  # wrong page, subject, mentor: none twice


def test_research_errors_read_what_a_killed_or_odd_evaluation_left(tmp_path):
    world = generate_world(tmp_path / "world", people=16, seed=2)
    questions = [q for q in world.train if q.hops == 1][:2]
    evaluation = tmp_path / "eval"
    evaluation.mkdir()
    journal = evaluation / "trajectories.jsonl"
    run_oracle(questions, world.corpus, journal)
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    starts = [r for r in records if r.get("record") == "start"]
    for record in records:  # the same pages, spelled as the corpus tool also reads them
        call = record.get("tool_call") or {}
        if call.get("name") == "visit":
            url = call["arguments"]["url"][0]
            call["arguments"]["url"] = [url + "#life"] if record["session_id"] == starts[0]["session_id"] else \
                url.replace("-", "%2D") + "?x=1"
        if record.get("record") == "turn":
            record["content"] += "\u2028\x85"  # line separators json.dumps leaves raw
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    journal.write_text("\n".join(lines) + '\n{"session_id": "torn', encoding="utf-8")
    (evaluation / "results.jsonl").write_text("".join(
        json.dumps({"question": r["question"], "session_id": r["session_id"], "correct": True}) + "\n\n"
        for r in starts) + '{"question": "cut', encoding="utf-8")
    assert research_errors(world.corpus.parent, evaluation) == {
        "sessions": 2, "wrong_page_sessions": 0, "wrong_page_share": 0.0, "accuracy_with_wrong_page": None,
        "accuracy_without": 1.0}
    (evaluation / "results.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=r"results.jsonl"):
        research_errors(world.corpus.parent, evaluation)


def test_the_oracle_writes_the_style_it_is_given(tmp_path):
    """The toy world's sessions in the rl style: the journal records it, and its search hits carry a date key."""
    world = generate_world(tmp_path, people=16, seed=2)
    question = next(q for q in world.train if q.hops == 1)
    assert run_oracle([question], world.corpus, tmp_path / "j.jsonl", observation_style="rl") == (1, 1)
    records = [json.loads(line) for line in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert records[0]["config"]["observation_style"] == "rl"
    search = next(r for r in records if r.get("tool_call") and r["tool_call"]["name"] == "search")
    assert '"date": ' in search["observation"]
