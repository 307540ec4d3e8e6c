"""The memory layer, below the engines: what a model needs of the machine before it loads. The GGUF header reader
(``header``: the one reader, also used by ``venus_edge.quantize``), the memory planner (``plan``), the README's
presets (``presets``), phones and laptops by their RAM (``devices``), what this machine offers (``machine``: physical
cores, available RAM, llama.cpp's CPU features), facts and clusters of cores read from /proc and /sys (``sysfs``),
what a device is and should run (``doctor``), and its temperatures and batteries (``sensors``, also read by
pacing). Standard library only (llama-cpp-python asked for its system info); nothing here loads a model.

    header = read_model_header("model.gguf")
    plan = plan_memory(header, ram_bytes=parse_size("6G"))

Every public name of the modules is available here.
"""

from venus_edge.memory import devices, doctor, header, machine, plan, presets, sensors, sysfs
from venus_edge.memory.devices import *  # noqa: F403
from venus_edge.memory.doctor import *  # noqa: F403
from venus_edge.memory.header import *  # noqa: F403
from venus_edge.memory.machine import *  # noqa: F403
from venus_edge.memory.plan import *  # noqa: F403
from venus_edge.memory.presets import *  # noqa: F403
from venus_edge.memory.sensors import *  # noqa: F403
from venus_edge.memory.sysfs import *  # noqa: F403

__all__ = sorted([*devices.__all__, *doctor.__all__, *header.__all__, *machine.__all__, *plan.__all__,
                  *presets.__all__, *sensors.__all__, *sysfs.__all__])
