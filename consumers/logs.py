"""The cleaner's JSON-line logs: :mod:`acidclean.shared.logs`, which every service shares."""

from __future__ import annotations

from acidclean.shared.logs import LOGGER_NAME, JsonLineFormatter, configure_json_logging, flush_logs, log

__all__ = ["LOGGER_NAME", "JsonLineFormatter", "configure_json_logging", "flush_logs", "log"]
