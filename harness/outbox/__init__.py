"""Seed 003's way back, MongoDB -> Kafka: the application writing documents with their outbox
(``workload``, ``writer``), the relays under test (``relays``) and the relay process
(``relay``), and what each stage holds for the checker (``stages``). ``harness.run.outbox``
runs one.
"""
