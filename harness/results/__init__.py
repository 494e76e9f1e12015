"""What runs came to: the results model (results.json), each variant's outcome, the
faults that did not fire, and soak figures over seeds.
"""
