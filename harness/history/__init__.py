"""The history: every operation and fault of a run as it happens, and the fault
windows derived from it.
"""
