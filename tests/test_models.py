"""Model resolution: local paths, and hub repos through huggingface_hub's cache in offline mode."""

from __future__ import annotations

import shutil

import pytest

from venus_edge.cli import main
from venus_edge.engines.models import resolve_model
from venus_edge.errors import ModelNotFoundError


def _fake_hub_cache(root, repo_id, files, source):
    """The folder layout huggingface_hub writes: models--owner--name/{refs/main, snapshots/<rev>/...}."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    revision = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for name in files:
        shutil.copy(source, snapshot / name)
    return snapshot


def test_local_path(smollm2_gguf):
    assert resolve_model(str(smollm2_gguf)) == smollm2_gguf


def test_missing_local_path(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no such file"):
        resolve_model(str(tmp_path / "nope.gguf"))


def test_hub_repo_from_the_offline_cache_picks_the_quant(tmp_path, smollm2_gguf, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = _fake_hub_cache(tmp_path, "acme/Model-GGUF", ["model-Q8_0.gguf", "model-Q4_K_M.gguf"], smollm2_gguf)
    assert resolve_model("acme/Model-GGUF", cache_dir=tmp_path) == snapshot / "model-Q4_K_M.gguf"
    assert resolve_model("acme/Model-GGUF:model-Q8_0.gguf", cache_dir=tmp_path) == snapshot / "model-Q8_0.gguf"
    with pytest.raises(ModelNotFoundError, match="no Q2_K GGUF"):
        resolve_model("acme/Model-GGUF", quant="Q2_K", cache_dir=tmp_path)


def test_hub_repo_not_cached_offline_says_how_to_pass_a_model(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match=r"hf download inclusionAI/DR-Venus-4B-RL-GGUF") as raised:
        resolve_model("inclusionAI/DR-Venus-4B-RL-GGUF", cache_dir=tmp_path)
    assert "(--model /path/to/model.gguf)" in raised.value.message_for({"model": "--model"})


def test_cli_default_model_unreachable_exits_3_with_the_hint(docs_corpus, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["research", "q", "--corpus", str(docs_corpus)]) == 3
    assert "--model" in capsys.readouterr().err


def test_cli_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["research", "q"])
    assert exit_info.value.code == 2 and "--corpus" in capsys.readouterr().err


def test_cli_empty_corpus_is_a_clear_error(smollm2_gguf, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert (
        main(["research", "q", "--model", str(smollm2_gguf), "--corpus", str(tmp_path / "empty"), "--n-ctx", "512"])
        == 3
    )
    assert "empty" in capsys.readouterr().err


def test_without_a_network_the_cache_is_read_at_once_not_after_retries(tmp_path, smollm2_gguf, monkeypatch, caplog):
    """Online mode on a machine whose resolver cannot find the hub: huggingface_hub retried for ~25 s, logging a
    warning per retry, before the one-line error. The failed name lookup (mocked: the test touches no network)
    sends it to the cache at once: a cached model resolves, and an uncached one is the error, with no hub call."""
    import socket

    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    looked_up: list[str] = []

    def no_resolver(host: str, *args: object, **kwargs: object) -> list[object]:
        looked_up.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    def no_call(*args: object, **kwargs: object) -> None:
        raise AssertionError("the hub was called without a network")

    monkeypatch.setattr(socket, "getaddrinfo", no_resolver)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", no_call)
    snapshot = _fake_hub_cache(tmp_path, "acme/Model-GGUF", ["model-Q4_K_M.gguf"], smollm2_gguf)
    assert resolve_model("acme/Model-GGUF", cache_dir=tmp_path) == snapshot / "model-Q4_K_M.gguf"
    with pytest.raises(ModelNotFoundError, match="the hub cannot be reached"):
        resolve_model("acme/Other-GGUF", cache_dir=tmp_path)
    assert looked_up and set(looked_up) == {"huggingface.co"}
    assert "Retrying" not in caplog.text
