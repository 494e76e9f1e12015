"""The fault families, one module each; ``harness.faults.kinds`` finds them here by kind."""
