"""The producer's long bodies, compiled apart from the ``Producer`` class that calls them.

``Producer`` is one compiled class, so its methods stay in ``aioaccum/producer.py``; what a
method does at length lives here, in functions that take the producer (through a protocol of
what they read) and never import the facade.
"""
