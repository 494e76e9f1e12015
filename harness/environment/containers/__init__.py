"""The containers backend: the lab's servers and consumers in containers (``environment``), on
Docker or a podman service the lab starts (``engine``), from images built here (``images``,
``specs``); the registry loads ``backend`` when it is asked for.
"""
