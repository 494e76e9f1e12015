"""The Spark runtime: a driver running a structured-streaming query per lane (``runtime``),
writing from ``foreachBatch`` or through MongoDB's Spark connector (``connector``); what the
MongoDB driver saw of its writes (``driver_watch``) and the tasks Spark lost, read from its
driver's log (``log``)."""
