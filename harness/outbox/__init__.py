"""Seed 003's way back, MongoDB -> Kafka: the application writing documents with their outbox
(``workload``, ``writer``), the relays under test (``relays``) and the relay process
(``relay``), and what each stage holds for the checker (``stages``). An outbox scenario runs
through the one run loop (``harness.run.runner``): its source is the application
(``harness.run.outbox``), its lanes the relays.
"""
