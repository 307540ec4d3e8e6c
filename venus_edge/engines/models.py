"""Where a model comes from: a local GGUF path, or a GGUF file in a Hugging Face hub repo.

Hub downloads go through ``huggingface_hub``, so its cache (``HF_HUB_CACHE`` / ``HF_HOME``), its offline mode
(``HF_HUB_OFFLINE=1``: the cache only) and its token are respected.

Spec forms:
    /path/to/model.gguf                          a local file
    owner/name                                   the repo's Q4_K_M GGUF (or its only GGUF)
    owner/name:file-Q8_0.gguf                    one file of the repo
"""

from __future__ import annotations

import os
from pathlib import Path

from venus_edge.errors import ModelNotFoundError

__all__ = ["resolve_model"]

DEFAULT_MODEL = "inclusionAI/DR-Venus-4B-RL-GGUF"
DEFAULT_QUANT = "Q4_K_M"


def resolve_model(spec: str | os.PathLike[str] = DEFAULT_MODEL, *, quant: str = DEFAULT_QUANT,
                  cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return a local path to the GGUF file named by ``spec``, downloading it from the hub if needed.

    Args:
        spec: a path, ``owner/name`` or ``owner/name:filename`` (see module docstring).
        quant: the quant type picked when a repo holds several GGUF files and no filename is given.
        cache_dir: the hub cache folder (default: huggingface_hub's).

    Raises:
        ModelNotFoundError: no such local file, a repo or file that cannot be fetched (offline, missing,
            private), or a repo with several GGUF files and none of type ``quant``.
    """
    text = os.fspath(spec)
    path = Path(text).expanduser()
    if path.exists() or (text.endswith(".gguf") and ":" not in text) or text.startswith((".", "/", "~")):
        if not path.is_file():
            raise ModelNotFoundError.for_path(path)
        return path
    repo_id, _, filename = text.partition(":")
    if repo_id.count("/") != 1:
        raise ModelNotFoundError(text, "not a file path and not a hub repo of the form owner/name[:file.gguf]")
    return _from_hub(repo_id, filename or None, quant, None if cache_dir is None else Path(cache_dir))


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` read now (huggingface_hub reads it once, at import, which may precede a change)."""
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE", "")
    return constants.HF_HUB_OFFLINE or value.strip().lower() in ("1", "true", "yes", "on")


def _cache_only() -> bool:
    """Read the hub cache only: offline (``hub_offline``), or the hub's name does not resolve (``_hub_resolves``)."""
    return hub_offline() or not _hub_resolves()


def _hub_resolves() -> bool:
    """Whether the hub's host name (``HF_ENDPOINT``, huggingface.co by default) resolves. Without a network the
    lookup fails at once, where huggingface_hub retries for ~25 s and logs a warning per retry; the cache is then
    read as offline."""
    import socket
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    host = urlsplit(constants.ENDPOINT).hostname
    if not host:
        return True  # an endpoint we cannot read: let huggingface_hub say what is wrong
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return False
    return True


def _from_hub(repo_id: str, filename: str | None, quant: str, cache_dir: Path | None) -> Path:
    from huggingface_hub import hf_hub_download

    filename = filename or _pick_gguf(repo_id, quant, cache_dir)
    try:
        return Path(hf_hub_download(repo_id, filename, cache_dir=cache_dir, local_files_only=_cache_only()))
    except Exception as exc:  # huggingface_hub raises many types (offline, HTTP, missing entry)
        raise ModelNotFoundError(f"{repo_id}:{filename}", f"cannot fetch it ({type(exc).__name__}: {exc})",
                                 advice=_hub_advice(repo_id, filename)) from exc


def _hub_advice(repo_id: str, filename: str | None = None) -> str:
    """What to do about a hub model that could not be fetched: offline, fetch it into the cache first (setting
    ``HF_HUB_OFFLINE`` again would change nothing); online, check the name, the network and the token."""
    local = "or give a local GGUF ({model} /path/to/model.gguf)"  # a template field: ModelNotFoundError's advice
    download = f"hf download {repo_id} {filename}" if filename else f"hf download {repo_id} --include '*.gguf'"
    download, repo_id = (text.replace("{", "{{").replace("}", "}}") for text in (download, repo_id))
    if hub_offline():
        return (f"HF_HUB_OFFLINE is set, so only the local hub cache is read: download the file once on a machine "
                f"that can reach the hub ({download}), unset HF_HUB_OFFLINE here, {local}.")
    return (f"Check the repo and file name at https://huggingface.co/{repo_id}, the network, and HF_TOKEN for a "
            f"private or gated repo, {local}.")


def _pick_gguf(repo_id: str, quant: str, cache_dir: Path | None) -> str:
    """The repo's GGUF of type ``quant``: from the hub's file list, or from the cache when offline."""
    from huggingface_hub import HfApi, snapshot_download

    try:
        if _cache_only():
            raise OSError("offline")
        names = HfApi().list_repo_files(repo_id)
    except Exception:  # offline or unreachable: fall back to what the cache holds
        try:
            folder = Path(snapshot_download(repo_id, cache_dir=cache_dir, local_files_only=True))
        except Exception as exc:
            raise ModelNotFoundError(repo_id, "not in the local hub cache and the hub cannot be reached",
                                     advice=_hub_advice(repo_id)) from exc
        names = [str(p.relative_to(folder)) for p in folder.rglob("*.gguf")]
    ggufs = sorted(n for n in names if n.endswith(".gguf"))
    if len(ggufs) == 1:
        return ggufs[0]
    matching = [n for n in ggufs if quant.lower() in Path(n).name.lower()]
    if not matching:
        raise ModelNotFoundError(
            repo_id,
            f"no {quant} GGUF among the repo's files ({', '.join(ggufs) or 'none'}); name one as {repo_id}:FILE",
        )
    return matching[0]
