"""The one error root, ``VenusEdgeError``, the runtime's errors, and the whole tree.

Faults are sorted by who caused them. The model's mistakes (bad format, unknown tool, bad arguments) never
raise: the agent records them on the turn and shows them to the model as observation text. What is left here
is what the user or the machine got wrong, and each error carries the values needed to fix it.

Each part keeps its tree in its own module (the runtime's here, ``venus_edge.tools.errors``,
``venus_edge.quantize.errors``, ``venus_edge.train.errors``; two runtime errors beside the code that raises them),
all under the one root, so a caller (the CLI) catches one class. An error that was a ``ValueError``,
``LookupError`` or ``RuntimeError`` before the tree existed keeps that as a second base. This module imports
nothing from the package, so every part may import it.

    VenusEdgeError
    ├── ModelNotFoundError      no model file at a path, or a hub repo/file that cannot be fetched
    ├── ModelLoadError          a file exists but llama.cpp cannot load it (corrupt, truncated, not GGUF)
    ├── ContextOverflowError    a prompt does not fit in n_ctx
    ├── ContextSettingsError    settings that cannot work together in n_ctx (also a ValueError)
    ├── MemoryPlanError         a model and context that do not fit in the RAM budget
    ├── EngineStateError        an engine used after close()
    ├── EngineConnectionError   a model server that cannot be reached or fails (after retries)
    ├── GenerationCancelled     raised by an ``on_text`` callback to stop a generation at its next token
    ├── TrajectoryError         a trajectory journal that cannot be read or resumed
    │   └── SessionLockedError      a session that another writer is writing (``venus_edge.session_lock``)
    ├── SetupError              a session that cannot be set up from its settings (``venus_edge.session``)
    ├── QuestionTooLongError    a question over the server's limit (``venus_edge.server``; also a ValueError)
    ├── QueueFullError          the server's queue is full (``venus_edge.server``)
    ├── ToolError               the tool layer (``venus_edge.tools.errors``)
    │   ├── ToolArgumentError       a call's arguments do not fit the tool's schema (also a ValueError)
    │   ├── CorpusError             a local corpus
    │   │   ├── EmptyCorpusError        the folder holds no readable document
    │   │   ├── DocumentNotFoundError   a URL that names no document of the corpus (also a LookupError)
    │   │   └── UnreadableDocumentError a document that can no longer be read
    │   ├── FetchError              a page could not be fetched
    │   ├── PdfError                bytes that are not a readable PDF (also a ValueError)
    │   ├── WebSearchError          no search engine answered a query
    │   └── ToolInterrupted         a call stopped at its deadline (the session's time limit or cancel)
    │       ├── ToolTimeout             the time limit passed
    │       └── ToolCancelled           the session was cancelled
    ├── QuantizeError           HF checkpoint -> GGUF -> quantized GGUF (``venus_edge.quantize.errors``)
    │   ├── ConversionError         a checkpoint that cannot be converted; no output left behind
    │   │   ├── UnsupportedArchitectureError
    │   │   ├── MissingTensorError
    │   │   ├── TensorShapeError
    │   │   ├── TokenizerFilesMissingError
    │   │   ├── CheckpointNotFoundError
    │   │   ├── OutputNotWritableError
    │   │   └── DiskFullError
    │   ├── GGUFReadError           a GGUF file that is missing, truncated or corrupt
    │   └── QuantizationError       llama.cpp's quantizer failed or the type is unknown
    └── TrainError              training (``venus_edge.train.errors``)
        ├── ConfigError             a run config that breaks a rule (also a ValueError)
        ├── Dropped                 a cleaning rule drops a whole sample
        ├── RolloutServerError      the rollout server could not be given the policy (also a RuntimeError)
        └── OracleGaveUp            the toy world's oracle found no fact it needed (also a RuntimeError)
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "ContextOverflowError",
    "ContextSettingsError",
    "EngineConnectionError",
    "EngineStateError",
    "GenerationCancelled",
    "MemoryPlanError",
    "ModelLoadError",
    "ModelNotFoundError",
    "SessionLockedError",
    "TrajectoryError",
    "VenusEdgeError",
]


class VenusEdgeError(Exception):
    """Base class of every error the runtime raises on purpose."""


class ModelNotFoundError(VenusEdgeError):
    """Raised when a model path does not exist or a hub file cannot be fetched.

    Attributes:
        source: what the user asked for (a path, or ``repo_id`` / ``repo_id:filename``).
        reason: what went wrong, without the advice.
    """

    def __init__(self, source: str, reason: str) -> None:
        self.source, self.reason = source, reason
        super().__init__(
            f"model {source!r} not found: {reason}. "
            "Pass a local GGUF with --model /path/to/model.gguf, or a hub repo as --model owner/name:file.gguf "
            "on a machine that can reach the Hugging Face hub (set HF_HUB_OFFLINE=1 to use only the local cache)."
        )


class ModelLoadError(VenusEdgeError):
    """Raised when llama.cpp refuses a model file (bad magic, truncated tensor data, unknown architecture).

    Attributes:
        path: the file that failed to load.
        reason: what went wrong (``not a GGUF file: ...``).
    """

    def __init__(self, path: Path, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"cannot load model {str(path)!r}: {reason}")


class ContextOverflowError(VenusEdgeError):
    """Raised when a prompt is longer than the context window.

    Attributes:
        prompt_tokens: tokens in the prompt.
        n_ctx: the context window in tokens.
    """

    def __init__(self, prompt_tokens: int, n_ctx: int, hint: str = "raise n_ctx or shorten the question") -> None:
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx
        super().__init__(f"prompt is {prompt_tokens:,} tokens; n_ctx is {n_ctx:,}; {hint}")


class ContextSettingsError(VenusEdgeError, ValueError):
    """Session settings that cannot work together in the context window (an answer reserve larger than n_ctx, a
    system prompt that leaves no room to research); the message names the rule, the values and the fix."""


class MemoryPlanError(VenusEdgeError):
    """Raised when no context window and KV-cache type fit the model in the RAM budget
    (``venus_edge.memory.plan_memory``); the message names the numbers and what would fit.

    Attributes:
        needed_bytes: resident memory of the smallest plan tried, in bytes (the weights alone when even they
            do not fit).
        usable_bytes: memory a plan may use: the RAM budget less the headroom, in bytes.
    """

    def __init__(self, reason: str, *, needed_bytes: int, usable_bytes: int) -> None:
        self.needed_bytes = needed_bytes
        self.usable_bytes = usable_bytes
        super().__init__(reason)


class EngineStateError(VenusEdgeError):
    """Raised when an engine is used in a state that does not allow the call (after close())."""


class EngineConnectionError(VenusEdgeError):
    """Raised when a model server (``OpenAIEngine``) cannot be reached, answers with errors after the retries,
    or breaks off a generation.

    Attributes:
        url: the server address.
    """

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        super().__init__(f"model server {url}: {reason}")


class GenerationCancelled(VenusEdgeError):
    """Raised by an ``on_text`` callback to stop the generation that called it: every engine then ends the call at
    that token and returns what it decoded with ``finish_reason == "cancelled"`` (``engine.StopStream``). The
    exception never leaves the engine's ``generate``."""


class TrajectoryError(VenusEdgeError):
    """Raised when a trajectory journal cannot be parsed or does not match the session it should resume.

    Attributes:
        path: the journal file.
        line: 1-based line number of the bad record, or 0 when the fault is not tied to a line.
    """

    def __init__(self, path: Path, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"trajectory {where}: {reason}")


class SessionLockedError(TrajectoryError):
    """Raised when a session's journal lock is held by another writer (``venus_edge.session_lock``): two writers
    of one session would each append its turns.

    Attributes:
        session_id: the session.
        holder: what the holder recorded in the lock file: ``pid``, ``host``, ``thread``, ``command``, ``since``
            (ISO 8601, UTC); empty when it had not written it yet.
        lock_path: the lock file.
    """

    def __init__(self, path: Path, session_id: str, holder: dict[str, object], lock_path: Path) -> None:
        self.session_id = session_id
        self.holder = holder
        self.lock_path = lock_path
        if holder:
            who = (f"pid {holder.get('pid')} on {holder.get('host')} (thread {holder.get('thread')}), running "
                   f"{holder.get('command')!r}, since {holder.get('since')}")
        else:
            who = "another writer that has not recorded its name yet"
        super().__init__(path, 0, f"session {session_id} is being written by {who}; one writer per session: wait "
                                  f"for it to end (or stop it) and try again (lock file {lock_path})")
