"""Every error the training part raises, in one tree under the package's root ``VenusEdgeError``.

    TrainError
    ├── ConfigError          a run config that breaks a rule: the setting, its value, the fix (also a ValueError)
    ├── Dropped              a cleaning rule drops a whole sample; the message is the reason
    ├── RolloutServerError   the rollout server could not be given the policy (also a RuntimeError)
    └── OracleGaveUp         the toy world's oracle found no fact it needed (also a RuntimeError)

The second bases keep what callers caught before the tree existed: a bad config is a ``ValueError``, a rollout
server or oracle failure a ``RuntimeError``.
"""

from __future__ import annotations

from typing import Any

from venus_edge.errors import VenusEdgeError

__all__ = ["ConfigError", "Dropped", "OracleGaveUp", "RolloutServerError", "TrainError"]


class TrainError(VenusEdgeError):
    """Base class of every error the training part raises on purpose."""


class ConfigError(TrainError, ValueError):
    """Raised when a run config (``SFTConfig``, ``IGPOConfig``, ``LoraSettings``) breaks a rule, in Python or in a
    file; the message gives the rule, the values seen and the fix.

    Attributes:
        setting: the setting that broke the rule (the first one named, for a rule between settings; empty for a
            file that is no mapping of settings).
        value: its value.
    """

    def __init__(self, message: str, *, setting: str, value: Any) -> None:
        self.setting = setting
        self.value = value
        super().__init__(message)


class Dropped(TrainError):
    """A rule drops the whole sample; the message is the reason (its text before a colon is the counted kind)."""


class RolloutServerError(TrainError, RuntimeError):
    """The rollout server could not be given the policy: it did not start (llama-server, vLLM, SGLang), its weight
    update failed or was refused (vLLM's ``reload_weights``, SGLang's ``/update_weights_from_disk``), or
    ``sync_command`` failed."""


class OracleGaveUp(TrainError, RuntimeError):
    """An observation did not hold what the oracle needed; the session ends without an answer."""
