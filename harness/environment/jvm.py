"""JVM options every JVM the lab starts shares (Kafka nodes, the storage tool, Spark drivers).

The client JIT only, and a JVM sized for one CPU (its GC and compiler threads): the lab's JVMs
move a few thousand records a second and run small jobs, and C2 compiling costs more than it
ever gains here. Measured side by side on 2 busy cores (2 rounds, medians, defaults -> these):
three Kafka nodes up -> ready 33.2 -> 19.6 s, CPU-seconds to start 24.5 -> 13.5, in the first
30 s idle 9.2 -> 5.7, to move 20000 records 8.9 -> 4.2; a Spark session starts in 9-11 s
instead of 29-32 s, and six small aggregations take 6-8 s instead of 20-23 s.
"""

LIGHT_JVM: tuple[str, ...] = ("-XX:TieredStopAtLevel=1", "-XX:ActiveProcessorCount=1")
