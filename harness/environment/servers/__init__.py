"""One module per server the lab starts: how it is launched, configured and probed
for readiness, whatever backend (processes or containers) runs it.
"""
