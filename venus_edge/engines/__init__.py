"""The engines: everything that turns token ids into text, behind one ``Engine`` protocol.

- ``base``: the ``Engine`` protocol, ``SamplingParams``, ``Completion``, ``GenerationStats``, ``StopStream``,
  ``stream_generation``, the room check and the abilities ``TextCompleter`` and ``ThreadControl``; loads no
  backend.
- ``llama_cpp``: ``LlamaCppEngine``, llama.cpp in-process; ``batched``: ``BatchedLlamaCppEngine``, several
  sequences on one context; ``openai``: ``OpenAIEngine``, an OpenAI-compatible server.
- ``prompt_cache`` (the system prompt's KV state on disk), ``vocab`` (exact text of llama.cpp tokens) and
  ``models`` (a local path or a hub repo to a GGUF file).

Every name a module of this package lists in its ``__all__`` is exported here (and at the package root), loaded on
first use: ``import venus_edge.engines.base`` must not load llama.cpp.
"""

from typing import Any as _Any

from venus_edge.lazy import LazyExports as _LazyExports

_MODULE_EXPORTS = {
    "base": ("Completion", "Engine", "GenerationStats", "SamplingParams", "StopStream", "TextCompleter",
             "ThreadControl", "stream_generation"),
    "batched": ("BatchedLlamaCppEngine", "SequenceEngine"),
    "decode": ("KVContext", "decode_loop", "sampler_chain"),
    "llama_cpp": ("LlamaCppEngine",),
    "models": ("resolve_model",),
    "openai": ("OpenAIEngine",),
    "speculative": ("DraftLength", "DraftModel", "Drafter", "ModelDrafter", "PromptLookup",
                     "check_same_vocabulary", "expected_tokens"),
    "prompt_cache": ("PromptCache", "PromptCacheCounts", "default_prompt_cache_dir", "stable_prefix_length"),
    "vocab": ("Vocabulary",),
}
_EXPORTS = _LazyExports(__name__, _MODULE_EXPORTS)


def __getattr__(name: str) -> _Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.listing(globals())


__all__ = _EXPORTS.names
