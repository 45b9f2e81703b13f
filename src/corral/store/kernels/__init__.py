"""Kernels: placement rows, kill orders, agent reports (epoch-fenced), declaring kernels gone.

One module per noun; these are the names the rest of Corral calls (`kernels.write_placements`)."""

from corral.store.kernels.ends import (
    close_output_of,
    end_kernels,
    move_to_terminating,
    order_force_kill,
    order_kill,
    release,
)
from corral.store.kernels.orders import get, orders_for, sessions_on
from corral.store.kernels.placements import write_placements
from corral.store.kernels.reports import apply_report, apply_reports, mark_started, report_rounds
from corral.store.kernels.rows import AGENT_REPORTS

__all__ = [
    "AGENT_REPORTS",
    "apply_report",
    "apply_reports",
    "close_output_of",
    "end_kernels",
    "get",
    "mark_started",
    "move_to_terminating",
    "order_force_kill",
    "order_kill",
    "orders_for",
    "release",
    "report_rounds",
    "sessions_on",
    "write_placements",
]
