"""``SessionSettings`` (the record the CLI builds once from its flags) and ``Session``'s rollouts over the engines'
declared abilities, with scripted engines (no model load)."""

from __future__ import annotations

import pytest

from venus_edge.cli import build_parser
from venus_edge.session import SAMPLE_SEED_STRIDE, Session, SessionSettings
from venus_edge.testing import ScriptedEngine, answer_turn


def test_the_settings_defaults_are_the_flags_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("VENUS_EDGE_API_KEY", raising=False)
    from_flags = SessionSettings.from_args(build_parser().parse_args(["research", "q", "--corpus", str(tmp_path)]))
    assert from_flags == SessionSettings(corpus=(tmp_path,))
    assert SessionSettings().agent_config() == from_flags.agent_config()


def test_every_flag_reaches_the_settings(tmp_path):
    argv = ["research", "q", "--corpus", str(tmp_path), "--engine", "openai", "--base-url", "http://127.0.0.1:9",
            "--api-key", "k", "--max-turns", "7", "--max-tokens", "99", "--time-limit", "12", "--n-ctx", "2048",
            "--ram", "1G", "--no-prompt-cache", "--temperature", "0.5", "--seed", "3", "--strict",
            "--min-tool-calls", "2", "--require-calls", "search,visit", "--context-policy", "keep-last-k",
            "--keep-last", "1", "--answer-reserve", "64"]
    settings = SessionSettings.from_args(build_parser().parse_args(argv))
    assert (settings.engine, settings.base_url, settings.api_key) == ("openai", "http://127.0.0.1:9", "k")
    assert (settings.n_ctx, settings.ram_bytes, settings.prompt_cache) == (2048, 1 << 30, False)
    config = settings.agent_config(logprobs=True)
    assert (config.max_turns, config.time_limit_s, config.seed, config.strict, config.min_tool_calls) == (7, 12, 3,
                                                                                                         True, 2)
    assert (config.context_policy, config.keep_last, config.answer_reserve_tokens) == ("keep-last-k", 1, 64)
    assert config.required_calls == ("search", "visit")
    assert (config.sampling.max_tokens, config.sampling.temperature, config.sampling.logprobs) == (99, 0.5, True)


def test_require_calls_names_the_tools(tmp_path, capsys):
    """A name that is not a tool is a usage error naming the flag and the tools."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["research", "q", "--corpus", str(tmp_path), "--require-calls", "search,browse"])
    assert exited.value.code == 2
    assert "--require-calls: 'browse' is not a tool; the tools are search, visit" in capsys.readouterr().err


def test_an_openai_engine_needs_its_server():
    with pytest.raises(ValueError, match="base_url"):
        SessionSettings(engine="openai")


class _ServerLike(ScriptedEngine):
    """A scripted engine that declares it takes concurrent requests, as a model server does."""

    concurrent_rollouts = True


def test_rollouts_run_at_once_only_where_the_engines_declare_it():
    config = SessionSettings(seed=5).agent_config()
    alone = ScriptedEngine([answer_turn("a"), answer_turn("b")])
    session = Session([alone], [], config)
    assert session.parallel_engines(2) == [alone]
    assert sorted((i, r.answer) for i, r in session.rollouts("q", [0, 1])) == [(0, "a"), (1, "b")]
    assert alone.seeds == [5, 5 + SAMPLE_SEED_STRIDE]  # each sample its own seed, one rollout at a time

    server = _ServerLike(lambda prompt: answer_turn("x"))
    assert Session([server], [], config).parallel_engines(3) == [server] * 3
    sequences = [ScriptedEngine([answer_turn(str(i))]) for i in range(3)]
    together = Session(list(sequences), [], config)
    assert together.parallel_engines(2) == sequences[:2] and together.engine is sequences[0]
    assert {i: r.answer for i, r in together.rollouts("q", [0, 1, 2])} == {0: "0", 1: "1", 2: "2"}
