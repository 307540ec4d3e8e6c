"""The pluggable tool layer: the Tool interface, the registry, search and visit over a local corpus or the web,
and record/replay of tool calls. Every name a module of this package lists in its ``__all__`` is exported here;
the error tree is drawn in ``venus_edge.tools.errors``."""

from venus_edge.tools import (
    base,
    corpus,
    errors,
    fetch,
    observation_styles,
    python_interpreter,
    replay,
    sandbox,
    search,
    visit,
    web_search,
)
from venus_edge.tools.base import *  # noqa: F403
from venus_edge.tools.corpus import *  # noqa: F403
from venus_edge.tools.errors import *  # noqa: F403
from venus_edge.tools.fetch import *  # noqa: F403
from venus_edge.tools.observation_styles import *  # noqa: F403  # noqa: F403
from venus_edge.tools.python_interpreter import *  # noqa: F403
from venus_edge.tools.replay import *  # noqa: F403
from venus_edge.tools.sandbox import *  # noqa: F403
from venus_edge.tools.search import *  # noqa: F403
from venus_edge.tools.visit import *  # noqa: F403
from venus_edge.tools.web_search import *  # noqa: F403

__all__ = sorted(
    name
    for module in (base, corpus, errors, fetch, observation_styles, python_interpreter, replay, sandbox, search, visit,
                   web_search)
    for name in module.__all__
)
