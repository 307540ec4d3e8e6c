"""DR-Venus's wire protocol: the only package that knows the text format the model was trained on.

``render`` writes the system prompt, the ChatML conversation and the observations byte-exact; ``parse`` splits a
model turn into reasoning / tool call / answer with a list of format errors; ``style`` holds what the two observation
styles (the authors' inference code, the RL rollouts) render differently. Inference (``venus_edge.agent``), SFT
and the RL format check use these same functions. Every public name of both is available here:
``from venus_edge import protocol; protocol.parse_turn(...)``.
"""

from venus_edge.protocol import parse, render
from venus_edge.protocol.parse import *  # noqa: F403
from venus_edge.protocol.render import *  # noqa: F403

__all__ = sorted([*render.__all__, *parse.__all__])
