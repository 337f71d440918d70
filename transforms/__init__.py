"""Beam transforms and the plain per-element functions behind them."""
