"""Exploration: randomized fault schedules held against each variant's promise, and each
violation shrunk to a minimal scenario."""
