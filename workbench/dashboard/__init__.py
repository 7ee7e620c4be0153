"""The Panel dashboard over ``runs/`` (``workbench dashboard``): see ``app.py``; its SQL is in ``queries.py``."""

from workbench.dashboard.app import build_app, save_static, serve_dashboard

__all__ = ["build_app", "save_static", "serve_dashboard"]
