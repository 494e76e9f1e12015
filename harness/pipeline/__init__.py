"""The pipeline that runs under test: runtimes, variants, and the Spark runtime's Kafka source."""
