"""The listener runtime: a consumer process per group member (``consumer``), polling the topic
and writing each batch through its variant, as a Kafka listener in production does."""
