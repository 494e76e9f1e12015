"""Kafka as the lab's clients see it: client settings and topic reads, the cluster's
brokers, controller and coordinators, and the wire format the fault proxy speaks.
"""
