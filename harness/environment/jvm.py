"""JVM options every JVM the lab starts shares (Kafka nodes, the storage tool, Spark drivers).

The client JIT only, and a JVM sized for one CPU (its GC and compiler threads): the lab's JVMs
move a few thousand records a second and run small jobs, and C2 compiling costs more than it
ever gains here - these start sooner and use about half the CPU of the defaults on a busy
machine (docs/performance.md).
"""

LIGHT_JVM: tuple[str, ...] = ("-XX:TieredStopAtLevel=1", "-XX:ActiveProcessorCount=1")
