"""The Kafka Connect runtime: a cluster of workers (``worker``, with their class-data archive
``cds``) that the lab reaches through Connect's REST API only (``settings``), a connector per
lane, validated by Connect before a run (``validate``) and followed while it runs (``watch``)."""
