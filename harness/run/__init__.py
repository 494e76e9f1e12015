"""Running scenarios: one scenario's lanes side by side, the loop in its middle, the
matrix of many, and an outbox scenario's run.
"""
