"""The lab's environment: Kafka, MongoDB and Spark behind one interface (``base``), on one of the
registered backends (``backends``: local processes, containers, or servers the lab did not start).

Typical use: ``with open_environment("local", DIR) as env:`` (from ``backends``) then
``env.kafka_bootstrap``, ``env.mongo_uri``, ``spark_session(env.spark)``,
``env.restart_broker(hard=True)``. A backend's modules load only when it is asked for.
"""
