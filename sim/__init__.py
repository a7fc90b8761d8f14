"""Simulator and analytical performance model of speculative decoding (never imports torch)."""
