"""Faults: the scenario's records (``kinds``), their seeded schedule (``schedule``, pure), the
nemesis that plays it against an environment (``nemesis``), and whether each fired (``fired``)."""
