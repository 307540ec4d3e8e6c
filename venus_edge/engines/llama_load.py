"""``llama_diagnostics``: load a llama.cpp model or context without losing what llama.cpp says about a failure.

With ``verbose=False`` llama-cpp-python points file descriptors 1 and 2 at ``/dev/null`` while it loads a model or
creates a context (``suppress_stdout_stderr`` in ``llama_cpp/_utils.py``), and its log callback prints errors to
the ``sys.stderr`` it has just replaced. Two things were lost that way:

1. the error lines llama.cpp logs before a load fails (``llama_model_load: error loading model: ...``): llama-cpp-
   python then raises only "Failed to load model from file". They are collected here and go into the
   ``ModelLoadError``;
2. the message of a ``GGML_ASSERT`` that aborts the process (``ggml_abort`` in ggml/src/ggml.c prints it to fd 2
   and calls ``abort()``): the process ended with status 134 and printed nothing. An abort callback
   (``ggml_set_abort_callback``) writes it to the real standard error, saved before the load, with the file being
   loaded; the process still ends (llama.cpp cannot go on after an assert), but the user reads why.

Both callbacks are process-wide in llama.cpp, so loads take a lock and put the previous callbacks back after.

Usage::

    with llama_diagnostics(path) as errors:
        model = _internals.LlamaModel(path_model=str(path), params=params, verbose=False)
    # on failure: raise ModelLoadError(path, failure_reason(exc, errors))
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp import _logger

__all__: list[str] = []  # internal to the engines and quantize's quality gates

# ggml_log_level (ggml/include/ggml.h; llama_cpp/_logger.py has an older numbering): ERROR, and CONT for the
# continuation of the line before it.
_LOG_ERROR, _LOG_CONT = 4, 5
_ABORT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)  # ggml_abort_callback_t(const char * error_message)
_load_lock = threading.RLock()  # re-entered by weights_not_repacked + llama_diagnostics


def _ggml_base() -> ctypes.CDLL | None:
    """The libggml-base that llama-cpp-python's libllama uses, or None when it lacks an abort callback.

    Looked up through libllama's handle (``dlsym`` searches its dependencies): the wheel's ``lib/`` folder holds
    copies, not links, of ``libggml-base.so`` and ``libggml-base.so.0``, and opening the first by path would load
    a second ggml whose abort callback libllama never calls.
    """
    library: ctypes.CDLL = llama_cpp.llama_cpp._lib
    if not hasattr(library, "ggml_set_abort_callback"):
        return None
    library.ggml_set_abort_callback.restype = ctypes.c_void_p
    library.ggml_set_abort_callback.argtypes = [ctypes.c_void_p]
    return library


_GGML_BASE = _ggml_base()


@contextlib.contextmanager
def llama_diagnostics(path: Path) -> Iterator[list[str]]:
    """Run a llama.cpp load with its error lines collected (the list yielded) and its abort message shown.

    Args:
        path: the model file, named in the abort message.

    Yields:
        The error lines llama.cpp logs during the block, stripped, in order.
    """
    errors: list[str] = []
    last_level = 0

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def collect(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
        nonlocal last_level
        last_level = last_level if level == _LOG_CONT else level
        if last_level == _LOG_ERROR and text.strip():
            errors.append(text.decode("utf-8", "replace").strip())

    with _load_lock:
        stderr_fd = os.dup(2)  # the real standard error, before llama-cpp-python points fd 2 at /dev/null

        @_ABORT_CALLBACK  # type: ignore[untyped-decorator]
        def show_abort(message: bytes) -> None:
            text = message.decode("utf-8", "replace")
            os.write(stderr_fd, f"venus-edge: llama.cpp aborted while loading {path}: {text}\n".encode())

        previous_abort = None if _GGML_BASE is None else _GGML_BASE.ggml_set_abort_callback(
            ctypes.cast(show_abort, ctypes.c_void_p))
        llama_cpp.llama_log_set(collect, ctypes.c_void_p(0))
        try:
            yield errors
        finally:
            llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
            if _GGML_BASE is not None:
                _GGML_BASE.ggml_set_abort_callback(previous_abort)
            os.close(stderr_fd)


@contextlib.contextmanager
def weights_not_repacked() -> Iterator[None]:
    """Load models in the block with their weights in the GGUF's own layout (``llama_model_params.
    use_extra_bufts = False``), for batch-invariant logits.

    llama.cpp's CPU backend repacks some quant types (Q4_0, Q4_K, IQ4_NL) for a matrix-matrix kernel whose sums
    run in another order than its matrix-vector one, so a position's logits differ between a batch of several
    tokens and a single token (by up to 0.2 here on Qwen2.5-Coder-0.5B Q4_K_M); in the GGUF's own layout, with
    flash attention, they are bit-identical, which speculative decoding needs to keep greedy text the same.
    ``llama_cpp.Llama`` exposes no argument for it, so the default-parameters function it calls is wrapped while the
    model loads (under the load lock: loads are serialized).
    """
    module = llama_cpp.llama_cpp
    default_params = module.llama_model_default_params

    def params_without_repacking() -> llama_cpp.llama_model_params:
        params: llama_cpp.llama_model_params = default_params()
        params.use_extra_bufts = False
        return params

    with _load_lock:
        module.llama_model_default_params = params_without_repacking
        try:
            yield
        finally:
            module.llama_model_default_params = default_params


def check_gpu_layers(gpu_layers: int, *, asked: str | None = None) -> None:
    """Refuse a ``gpu_layers`` that llama.cpp would ignore without a word.

    ``asked`` is how the caller's user spelled the request (``"--gpu-layers 20"`` on the command line); the message
    names it, ``gpu_layers=N`` otherwise.

    Raises:
        ValueError: below -1 (``n_gpu_layers``: -1 is all) or above C's int32 (llama.cpp's field would wrap to 0 or
            a negative "all"), or not 0 while this llama.cpp build has no GPU backend (``llama_supports_gpu_offload``):
            the model would run on the CPU while the caller expects a GPU.
    """
    if isinstance(gpu_layers, bool) or not isinstance(gpu_layers, int) or not -1 <= gpu_layers <= 2**31 - 1:
        raise ValueError(f"gpu_layers must be -1 (all), 0 (none) or a number of layers, not {gpu_layers!r}")
    if gpu_layers and not llama_cpp.llama_supports_gpu_offload():
        raise ValueError(f"{asked or f'gpu_layers={gpu_layers}'} asks for the GPU, but this llama-cpp-python was built "
                         "without a GPU backend; reinstall it with one (CMAKE_ARGS=-DGGML_CUDA=on pip install "
                         f"--force-reinstall --no-cache-dir llama-cpp-python=={llama_cpp.__version__} for NVIDIA, "
                         "-DGGML_METAL=on on Apple, "
                         "-DGGML_VULKAN=on; README, On a GPU) or ask for no GPU layers")


def load_model(path: Path, *, gpu_layers: int) -> Any:
    """A llama.cpp model (llama-cpp-python's ``_internals.LlamaModel``) of the GGUF at ``path`` with ``gpu_layers``
    layers on the GPU (``n_gpu_layers``; checked by the caller with ``check_gpu_layers``), for the engines that drive
    llama.cpp's low-level API (the batched engine, a draft model).

    Raises:
        ModelLoadError: llama.cpp could not load the file, with the error lines it logged (``llama_diagnostics``).
    """
    from llama_cpp import _internals

    from venus_edge.errors import ModelLoadError

    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = gpu_layers
    with llama_diagnostics(path) as errors:
        try:
            return _internals.LlamaModel(path_model=str(path), params=params, verbose=False)
        except ValueError as exc:
            raise ModelLoadError(path, failure_reason(exc, errors)) from exc


def failure_reason(error: Exception, errors: list[str]) -> str:
    """The reason for a ``ModelLoadError``: llama-cpp-python's exception and the error lines llama.cpp logged."""
    logged = "; ".join(line for line in errors if line)
    return f"{error}: {logged}" if logged else str(error)
