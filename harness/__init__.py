"""chaoslab: a chaos-testing lab for exactly-once ingestion from Kafka into MongoDB."""

__version__ = "0.1.0"
