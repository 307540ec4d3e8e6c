"""A persistent prompt cache: the KV state of the prompt prefix that every research session shares, on disk.

Every DR-Venus session opens with the same system prompt (the persona and the tools' JSON schemas, ~500 tokens)
and only its last line, ``Current date: YYYY-MM-DD``, changes from day to day. ``PromptCache`` saves the KV cache
of the prompt up to, not including, that date line, and a new engine (a new question, a new process) restores it
instead of evaluating it again; the date line and what follows are evaluated as usual.

``LlamaCppEngine(prompt_cache_dir=...)`` drives it: on a call whose prompt shares less than that stable prefix with
the KV cache (a fresh engine, or a KV cache holding another conversation), it restores the longest stored prefix
of the prompt; when none is stored, it evaluates the stable prefix first, saves it, then goes on with the rest of
the prompt, so building the cache costs no extra prefill. The restored tokens count as reused in
``GenerationStats.prompt_tokens_reused``.

The boundary (``stable_prefix_length``): the longest run of prompt tokens whose text lies entirely before the date
line of the first message. A token that straddles the start of the line (``"\\n\\nCurrent"``) stays out.

The key: a file is valid only for the same
1. model file: its real path, size and modification time (ns), plus the SHA-256 of its first and last MiB. Hashing
   a 2.5 GB file would cost seconds at every start; this identity costs a 2 MiB read and still changes when a
   file is replaced in place by another of the same size with its mtime kept;
2. KV cache layout: ``type_k``, ``type_v``, flash attention (it decides the V layout), unified KV, SWA;
3. RoPE settings (keys are stored after rotation): scaling type, frequency base and scale, YaRN parameters;
4. llama-cpp-python version, which pins the vendored llama.cpp and so its state format;
5. where and how the KV values were computed: the layers on the GPU (``n_gpu_layers``), the weight layout
   (llama.cpp's repacked CPU weights, ``use_extra_bufts``, sum in another order) and the build's backends and CPU
   features (``llama_print_system_info``). A state computed another way restores without error, but its values
   differ in the last bits, so the session could write other text than the same engine without the cache;
6. prefix token ids, exactly.
Items 1-5 form the file name's first part and are stored in the file's header; item 6 with them gives the second.

The file: ``VEKV`` magic, format version, a JSON header (key, token count, state size, SHA-256 of the state),
the prefix token ids (int32), then the state of sequence 0 as llama.cpp writes it. Written to a temporary file
and renamed into place (atomic). A file that is truncated, corrupt or made for something else is skipped with a
logged warning and deleted, and the prefix is saved again; it is never handed to llama.cpp unchecked.

Eviction: after each save, the folder keeps the most recently used files (a restore refreshes a file's mtime) up to
``max_files`` (default 8) and ``max_bytes`` in all (default 1 GiB); a state larger than ``max_bytes`` is not saved.
DR-Venus-4B's f16 KV cache takes 144 KiB per token, so a 500-token prefix is a ~72 MB file.

Source: llama.cpp ``include/llama.h``, ``llama_state_seq_get_size``, ``llama_state_seq_get_data`` and
``llama_state_seq_set_data`` (the state of one sequence: its KV cells, without the logits).

Departures from the obvious:
1. Not ``Llama.save_state()``: it copies the whole logits buffer (hundreds of MB with a Qwen vocabulary) and the
   whole context, where only sequence 0's KV cells are needed.
2. Not ``llama_state_seq_save_file``/``load_file``: llama.cpp's loader asserts (aborts the process) on some
   inconsistent files; reading the file ourselves lets a checksum reject a damaged one before llama.cpp sees it.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import hashlib
import json
import logging
import os
import secrets
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import llama_cpp
import numpy as np

from venus_edge.protocol import DATE_LINE_PREFIX, IM_END

__all__ = ["PromptCache", "PromptCacheCounts", "default_prompt_cache_dir", "stable_prefix_length"]

logger = logging.getLogger(__name__)

#: Files kept in the folder at most (the most recently used).
DEFAULT_MAX_FILES = 8
#: Bytes kept in the folder at most, all files together (1 GiB).
DEFAULT_MAX_BYTES = 1 << 30
FILE_MAGIC = b"VEKV"
FORMAT_VERSION = 1
SUFFIX = ".kvstate"
_SAMPLE_BYTES = 1 << 20  # the model file's first and last MiB are hashed into its identity
_STALE_TEMP_S = 3600.0  # a temporary file older than this was left by a killed writer
_SEQ = 0  # LlamaCppEngine's one sequence
_MAX_HEADER_BYTES = 1 << 16  # ours are ~1 KB; a damaged length must not make us read gigabytes


def default_prompt_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/venus-edge/prompt-cache`` (``~/.cache`` without it), beside the corpus indexes."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "venus-edge" / "prompt-cache"


def stable_prefix_length(prompt_ids: Sequence[int], token_bytes: Callable[[int], bytes]) -> int:
    """The number of leading tokens whose text lies entirely before the date line of the first message.

    The date line is a line that starts with ``protocol.DATE_LINE_PREFIX`` (``"Current date: "``), the last line of
    the system prompt (``protocol.render_system_prompt``). Tokens may straddle text boundaries: a token holding the
    line's first character (``"\\n\\nCurrent"``) is left out. Returns 0 when the first message (up to the first
    ``<|im_end|>``) has no date line.

    Args:
        prompt_ids: the prompt's token ids.
        token_bytes: the bytes of one token (``Vocabulary.token_bytes``: special tokens as their text).
    """
    marker = ("\n" + DATE_LINE_PREFIX).encode()
    end_of_message = IM_END.encode()
    text = bytearray()
    ends: list[int] = []  # ends[i]: bytes in the text of the first i + 1 tokens
    for token in prompt_ids:
        before = len(text)
        text += token_bytes(token)
        ends.append(len(text))
        hit = text.find(marker, max(0, before - len(marker) + 1))
        if hit != -1:
            return bisect.bisect_right(ends, hit + 1)  # hit + 1: where the date line starts
        if text.find(end_of_message, max(0, before - len(end_of_message) + 1)) != -1:
            return 0
    return 0


@dataclass
class PromptCacheCounts:
    """What a ``PromptCache`` did since it was made.

    Attributes:
        restores: prefixes restored from disk.
        restored_tokens: tokens in them.
        saves: prefixes saved.
        rejected: files skipped as truncated, corrupt or incompatible (each logged as a warning and deleted).
    """

    restores: int = 0
    restored_tokens: int = 0
    saves: int = 0
    rejected: int = 0


@dataclass(frozen=True)
class _Entry:
    path: Path
    tokens: list[int]
    state_bytes: int
    state_sha256: str
    state_offset: int


class _Rejected(Exception):
    """A cache file that cannot be used; the message says why."""


class PromptCache:
    """Saves and restores the KV state of prompt prefixes for one ``llama_cpp.Llama`` (sequence 0), under a folder.

    Usually made by ``LlamaCppEngine(prompt_cache_dir=...)``, which calls ``prepare`` on its decode thread.

    Args:
        directory: the cache folder (made on the first save); ``default_prompt_cache_dir()`` is the CLI's.
        llm: the context whose KV cache is saved and restored.
        model_path: the GGUF the context runs (part of the key).
        token_bytes: the bytes of one token, for ``stable_prefix_length``.
        max_files: files kept in the folder at most, most recently used first.
        max_bytes: bytes kept in the folder at most; a larger state is not saved.

    Raises:
        OSError: ``model_path`` cannot be read (the key needs its size, mtime and first and last MiB).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        llm: llama_cpp.Llama,
        model_path: str | os.PathLike[str],
        token_bytes: Callable[[int], bytes],
        *,
        max_files: int = DEFAULT_MAX_FILES,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if max_files < 1 or max_bytes < 1:
            raise ValueError(f"max_files and max_bytes must be >= 1, got {max_files} and {max_bytes}")
        self.directory = Path(directory)
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.counts = PromptCacheCounts()
        #: Why the folder could not be written (None while it can): set at the first failed save.
        self.unwritable: str | None = None
        self._llm = llm
        self._token_bytes = token_bytes
        self.key = _compatibility_key(llm, Path(model_path))
        self._key_json = json.dumps(self.key, sort_keys=True).encode()
        self._key_digest = hashlib.sha256(self._key_json).hexdigest()[:16]

    # ------------------------------------------------------------------------------------------ the engine's hook
    def prepare(self, prompt_ids: Sequence[int], reused: int) -> int:
        """Before ``Llama.generate``: make the KV cache hold the prompt's stable prefix, from disk when stored.

        Nothing happens when the KV cache already holds the stable prefix (``reused`` covers it) or the prompt has
        none. Otherwise the longest stored prefix of the prompt that is longer than ``reused`` is restored; if that
        falls short of the stable prefix, the rest of it is evaluated here and the stable prefix is saved. Either
        way ``llm.input_ids``/``n_tokens`` then match the KV cache, so ``Llama.generate`` evaluates only the rest.

        Args:
            prompt_ids: the whole prompt of this call.
            reused: prompt tokens the KV cache holds already (``engine._reused_prefix``).

        Returns:
            The prompt tokens not evaluated in this call: ``reused``, or the tokens restored from disk.
        """
        prompt_ids = list(prompt_ids)
        stable = stable_prefix_length(prompt_ids, self._token_bytes)
        if stable <= reused:
            return reused
        entry = self._lookup(prompt_ids)
        state = self._load_state(entry) if entry is not None and len(entry.tokens) > reused else None
        if entry is not None and state is not None:
            reused = self._restore(entry, state)  # the KV cache now holds these tokens only (0: llama.cpp refused)
        if reused < stable:
            if not self._llm._ctx.kv_cache_seq_rm(_SEQ, reused, -1):
                return reused  # a recurrent model's state cannot be cut back: leave it to Llama.generate
            self._llm.n_tokens = reused
            self._llm.eval(prompt_ids[reused:stable])
            self._save(prompt_ids[:stable])
        return reused

    # ------------------------------------------------------------------------------------------ lookup
    def entries(self) -> list[Path]:
        """The files in the folder made for this model and context (any prefix), newest first."""
        try:
            paths = list(self.directory.glob(f"{self._key_digest}-*{SUFFIX}"))
        except OSError:
            return []
        return sorted(paths, key=_mtime, reverse=True)

    def path_for(self, tokens: Sequence[int]) -> Path:
        """The file that holds (or would hold) the state of exactly ``tokens`` for this model and context."""
        digest = hashlib.sha256(self._key_json + np.asarray(tokens, dtype="<i4").tobytes()).hexdigest()[:40]
        return self.directory / f"{self._key_digest}-{digest}{SUFFIX}"

    def _lookup(self, prompt_ids: list[int]) -> _Entry | None:
        """The stored entry with the longest prefix of ``prompt_ids`` (shorter than the prompt), or None."""
        best: _Entry | None = None
        for path in self.entries():
            try:
                entry = self._read_entry(path)
            except FileNotFoundError:
                continue  # evicted by another process meanwhile
            except (_Rejected, OSError) as exc:
                self._reject(path, str(exc))
                continue
            n = len(entry.tokens)
            if n < len(prompt_ids) and prompt_ids[:n] == entry.tokens and (best is None or n > len(best.tokens)):
                best = entry
        return best

    def _read_entry(self, path: Path) -> _Entry:
        """Header and tokens of ``path``, checked against this cache's key and the file name.

        Raises:
            _Rejected: not a cache file of this format, a damaged header, another key, or a truncated file.
        """
        with path.open("rb") as handle:
            header = _read_header(handle)
            if header.get("key") != self.key:
                raise _Rejected("made for another model file or context settings")
            n_tokens, state_bytes = header.get("n_tokens"), header.get("state_bytes")
            if not isinstance(n_tokens, int) or not isinstance(state_bytes, int) or n_tokens < 1 or state_bytes < 1:
                raise _Rejected(f"bad token count or state size in the header: {n_tokens!r}, {state_bytes!r}")
            raw = handle.read(4 * n_tokens)
            if len(raw) != 4 * n_tokens:
                raise _Rejected(f"truncated: {len(raw) // 4} of {n_tokens} tokens")
            offset = handle.tell()
            size = os.fstat(handle.fileno()).st_size
        if size != offset + state_bytes:
            raise _Rejected(f"{size} bytes, expected {offset + state_bytes} (truncated or padded)")
        tokens = np.frombuffer(raw, dtype="<i4").tolist()
        if self.path_for(tokens) != path:
            raise _Rejected("its tokens do not match its name")
        return _Entry(path, tokens, state_bytes, str(header.get("state_sha256")), offset)

    # ------------------------------------------------------------------------------------------ restore and save
    def _load_state(self, entry: _Entry) -> bytearray | None:
        """The state bytes of ``entry``, checked against its SHA-256; None (the file rejected) when damaged."""
        state = bytearray(entry.state_bytes)
        try:
            with entry.path.open("rb") as handle:
                handle.seek(entry.state_offset)
                if handle.readinto(state) != entry.state_bytes:
                    raise _Rejected("truncated state")
        except FileNotFoundError:
            return None
        except (_Rejected, OSError) as exc:
            self._reject(entry.path, str(exc))
            return None
        if hashlib.sha256(state).hexdigest() != entry.state_sha256:
            self._reject(entry.path, "the state's SHA-256 does not match its header (corrupt)")
            return None
        return state

    def _restore(self, entry: _Entry, state: bytearray) -> int:
        """Empty sequence 0 and load ``state`` into it; the tokens it now holds (0 when llama.cpp refuses it)."""
        llm = self._llm
        llm._ctx.kv_cache_seq_rm(_SEQ, -1, -1)
        llm.n_tokens = 0
        buffer = (ctypes.c_uint8 * len(state)).from_buffer(state)
        if llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, buffer, len(state), _SEQ) == 0:
            llm._ctx.kv_cache_seq_rm(_SEQ, -1, -1)
            self._reject(entry.path, "llama.cpp refused the state (llama_state_seq_set_data returned 0)")
            return 0
        n = len(entry.tokens)
        llm.input_ids[:n] = entry.tokens
        llm.n_tokens = n
        llm._requires_eval = True  # no logits for the last restored token: Llama.generate evaluates at least one
        with contextlib.suppress(OSError):
            os.utime(entry.path)  # most recently used, for eviction
        self.counts.restores += 1
        self.counts.restored_tokens += n
        logger.info("prompt cache: restored %d tokens from %s", n, entry.path)
        return n

    def _save(self, tokens: list[int]) -> Path | None:
        """Write the state of sequence 0, which holds exactly ``tokens``; the file, or None when not written (after
        the folder failed once, ``unwritable``, nothing more is tried: one warning, not one per turn)."""
        if self.unwritable is not None:
            return None
        ctx = self._llm._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, _SEQ)
        if size > self.max_bytes:
            logger.info("prompt cache: a %d-byte state exceeds max_bytes %d; not saved", size, self.max_bytes)
            return None
        raw = bytearray(size)
        written = llama_cpp.llama_state_seq_get_data(ctx, (ctypes.c_uint8 * size).from_buffer(raw), size, _SEQ)
        if written == 0:
            logger.warning("prompt cache: llama_state_seq_get_data returned 0; the prefix is not saved")
            return None
        state = memoryview(raw)[:written]
        header = json.dumps({
            "key": self.key, "n_tokens": len(tokens), "state_bytes": written,
            "state_sha256": hashlib.sha256(state).hexdigest(),
        }, sort_keys=True).encode()
        path = self.path_for(tokens)
        temporary = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with temporary.open("wb") as handle:
                handle.write(FILE_MAGIC + struct.pack("<II", FORMAT_VERSION, len(header)) + header)
                handle.write(np.asarray(tokens, dtype="<i4").tobytes())
                handle.write(state)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except OSError as exc:  # a full disk, a read-only folder, a "folder" that is a file
            self.unwritable = f"{exc}"
            logger.warning("prompt cache: cannot write to %s (%s); this engine goes on without saving prefixes",
                           self.directory, exc)
            with contextlib.suppress(OSError):  # its folder may not even exist
                temporary.unlink(missing_ok=True)
            return None
        self.counts.saves += 1
        logger.info("prompt cache: saved %d tokens (%d bytes) to %s", len(tokens), written, path)
        self._evict(keep=path)
        return path

    def _evict(self, keep: Path) -> None:
        """Delete the least recently used files beyond ``max_files`` / ``max_bytes``, and stale temporary files."""
        try:
            files = [p for p in self.directory.iterdir() if p.suffix == SUFFIX and not p.name.startswith(".")]
            stale = [p for p in self.directory.glob(".*.tmp") if _age_s(p) > _STALE_TEMP_S]
        except OSError:
            return
        files.sort(key=lambda p: (p == keep, _mtime(p)), reverse=True)
        total = 0
        for index, path in enumerate(files):
            total += _size(path)
            if index > 0 and (index >= self.max_files or total > self.max_bytes):
                _unlink(path)
        for path in stale:
            _unlink(path)

    def _reject(self, path: Path, reason: str) -> None:
        logger.warning("prompt cache: ignoring %s: %s; it is deleted and the prefix will be saved again", path, reason)
        self.counts.rejected += 1
        _unlink(path)


def _read_header(handle: BinaryIO) -> dict[str, Any]:
    head = handle.read(12)
    if len(head) != 12 or head[:4] != FILE_MAGIC:
        raise _Rejected(f"not a prompt cache file (first bytes {head[:4]!r}, expected {FILE_MAGIC!r})")
    version, length = struct.unpack("<II", head[4:])
    if version != FORMAT_VERSION:
        raise _Rejected(f"format version {version}, expected {FORMAT_VERSION}")
    if length > _MAX_HEADER_BYTES:
        raise _Rejected(f"a {length}-byte header, more than {_MAX_HEADER_BYTES}")
    raw = handle.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _Rejected(f"unreadable header ({exc})") from None
    if not isinstance(header, dict):
        raise _Rejected("unreadable header (not an object)")
    return header


def _compatibility_key(llm: llama_cpp.Llama, model_path: Path) -> dict[str, Any]:
    """Everything besides the tokens that makes a saved KV state unusable when it differs (module docstring)."""
    real = model_path.resolve()
    stat = real.stat()
    sample = hashlib.sha256()
    with real.open("rb") as handle:
        sample.update(handle.read(_SAMPLE_BYTES))
        handle.seek(max(0, stat.st_size - _SAMPLE_BYTES))
        sample.update(handle.read(_SAMPLE_BYTES))
    params = llm.context_params
    model_params = llm.model_params
    return {
        "format": FORMAT_VERSION,
        "llama_cpp_python": llama_cpp.__version__,
        "model": {"path": str(real), "size_bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                  "head_tail_sha256": sample.hexdigest()},
        "kv": {name: int(getattr(params, name)) for name in
               ("type_k", "type_v", "flash_attn_type", "kv_unified", "swa_full")},
        "compute": {"n_gpu_layers": int(model_params.n_gpu_layers),
                    "weights_repacked": bool(model_params.use_extra_bufts),
                    "llama_cpp_build": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()},
        "rope": {
            "rope_scaling_type": int(params.rope_scaling_type), "yarn_orig_ctx": int(params.yarn_orig_ctx),
            **{name: round(float(getattr(params, name)), 6) for name in (
                "rope_freq_base", "rope_freq_scale", "yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast",
                "yarn_beta_slow")},
        },
    }


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _age_s(path: Path) -> float:
    return time.time() - _mtime(path)


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        logger.warning("prompt cache: cannot delete %s: %s", path, exc)
