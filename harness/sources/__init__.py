"""Where a run's records come from: the stage that writes its topic and keeps its truth."""
