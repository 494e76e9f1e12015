"""The notebooks' side of the lab: the few calls the notebooks make (``lab``) and
``chaoslab notebooks``, which executes them with papermill (``execute``).
"""
