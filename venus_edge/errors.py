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
    ├── UnknownFact             a /proc or /sys file that cannot be read (``venus_edge.memory.sysfs``)
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
    │   ├── SandboxUnavailable      the Python tool cannot isolate code here (also a RuntimeError)
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
    │   ├── QuantizationError       llama.cpp's quantizer failed or the type is unknown
    │   ├── QuantizedSourceError    a source GGUF that is already quantized (the phone profile names the master)
    │   └── ArmToolMissingError     no aarch64 llama.cpp build or qemu for the ARM check (also a FileNotFoundError)
    └── TrainError              training (``venus_edge.train.errors``)
        ├── ConfigError             a run config that breaks a rule (also a ValueError)
        ├── Dropped                 a cleaning rule drops a whole sample
        ├── RolloutServerError      the rollout server could not be given the policy (also a RuntimeError)
        └── OracleGaveUp            the toy world's oracle found no fact it needed (also a RuntimeError)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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
    """Base class of every error the runtime raises on purpose.

    An error whose advice names settings keeps its message as ``template``, with a ``{name}`` field per setting in
    the Python parameter's name (``{n_ctx}``, ``{answer_reserve_tokens}``): ``str(error)`` reads with those names,
    ``error.message_for(names)`` with a caller's own, e.g. the CLI's flags (``venus_edge.flags.SETTING_FLAGS``), so
    the fix it names is the one the caller can type.
    """

    #: The message with ``{setting}`` fields, or None when it names no setting.
    template: str | None = None

    def _named(self, template: str) -> str:
        """Keep ``template`` and return it read with the Python names (for ``Exception.__init__``)."""
        self.template = template
        return self.message_for({})

    def message_for(self, names: Mapping[str, str]) -> str:
        """The message with each setting called by ``names[setting]`` (the Python name where ``names`` has none)."""
        if self.template is None:
            return str(self)
        return self.template.format_map(_SettingNames(names))


class _SettingNames(dict[str, str]):
    """A setting's name for ``str.format_map``: the caller's, else the Python parameter's own."""

    def __missing__(self, setting: str) -> str:
        return setting


def missing_file_reason(path: Path, suffix: str) -> str:
    """Why ``path`` cannot be read as a ``suffix`` file, and what to give instead: a folder names the ``suffix``
    files it holds (the one to give when there is exactly one), anything else is "no such file"."""
    if not path.is_dir():
        return "no such file"
    inside = sorted(str(found) for found in path.glob(f"*{suffix}") if found.is_file())
    if len(inside) == 1:
        return f"it is a folder, not a {suffix} file; give the file inside it: {inside[0]}"
    if inside:
        shown = ", ".join(inside[:5]) + (f" and {len(inside) - 5} more" if len(inside) > 5 else "")
        return f"it is a folder, not a {suffix} file; give one of the {len(inside)} files in it: {shown}"
    return f"it is a folder with no {suffix} file in it; give a {suffix} file"


class ModelNotFoundError(VenusEdgeError):
    """Raised when a model path does not exist or a hub file cannot be fetched.

    Attributes:
        source: what the user asked for (a path, or ``repo_id`` / ``repo_id:filename``).
        reason: what went wrong, without the advice.
        advice: what to do, a template whose ``{model}`` is how the caller gives a model (``MODEL_ADVICE`` unless
            the raiser knows better, e.g. that the hub is offline); ``message_for({"model": "--model"})`` reads it
            with a flag.
    """

    def __init__(self, source: str, reason: str, *, advice: str | None = None) -> None:
        self.source, self.reason = source, reason
        self.advice = MODEL_ADVICE if advice is None else advice
        stated = f"model {source!r} not found: {reason}. ".replace("{", "{{").replace("}", "}}")
        super().__init__(self._named((stated + self.advice).rstrip()))

    def given_by(self, setting: str) -> ModelNotFoundError:
        """This error for a model that another setting gave (``judge``): its advice names that setting."""
        advice = re.sub(r"(?<!\{)\{model\}(?!\})", f"{{{setting}}}", self.advice)  # not an escaped {{model}}
        return ModelNotFoundError(self.source, self.reason, advice=advice)

    @classmethod
    def for_path(cls, path: Path) -> ModelNotFoundError:
        """The error for a local ``path`` that is not a file: a folder says which GGUF in it to give."""
        reason = missing_file_reason(path, ".gguf")
        return cls(str(path), reason, advice="" if path.is_dir() else None)


#: What to do about a model that was not found, when nothing more precise is known; ``{model}`` is how the caller
#: gives a model (``--model`` on most commands, the command itself where the model is its first argument).
MODEL_ADVICE = ("Give a local GGUF ({model} /path/to/model.gguf), or a hub repo ({model} owner/name:file.gguf) on a "
                "machine that can reach the Hugging Face hub (set HF_HUB_OFFLINE=1 to use only the local cache).")


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

    def __init__(self, prompt_tokens: int, n_ctx: int, hint: str = "raise {n_ctx} or shorten the question") -> None:
        """``hint`` is the advice, with ``{setting}`` fields for the settings it names (``VenusEdgeError``)."""
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx
        super().__init__(self._named(f"prompt is {prompt_tokens:,} tokens; n_ctx is {n_ctx:,}; {hint}"))


class ContextSettingsError(VenusEdgeError, ValueError):
    """Session settings that cannot work together in the context window (an answer reserve larger than n_ctx, a
    system prompt that leaves no room to research, a window above the model's trained context); the message names
    the rule, the values and a fix that works, its settings as ``{setting}`` fields (``VenusEdgeError``)."""

    def __init__(self, template: str) -> None:
        super().__init__(self._named(template))


class MemoryPlanError(VenusEdgeError):
    """Raised when no context window and KV-cache type fit the model in the RAM budget
    (``venus_edge.memory.plan_memory``); the message names the numbers and what would fit.

    Attributes:
        needed_bytes: resident memory of the smallest plan tried, in bytes (the weights alone when even they
            do not fit).
        usable_bytes: memory a plan may use: the RAM budget less the headroom, in bytes.
    """

    def __init__(self, reason: str, *, needed_bytes: int, usable_bytes: int, names_settings: bool = False) -> None:
        """``names_settings``: ``reason`` writes the settings it names as ``{setting}`` fields (``VenusEdgeError``)."""
        self.needed_bytes = needed_bytes
        self.usable_bytes = usable_bytes
        super().__init__(self._named(reason) if names_settings else reason)


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
