"""Optional integrations (web frameworks, Spark).

Each submodule imports its framework at import time, so import the one you need, e.g.
``from aioaccum.integrations.asgi import producer_lifespan``. The core package never imports
anything from here.
"""
