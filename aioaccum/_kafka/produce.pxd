# Marks produce.py for compilation as it is (see aioaccum/_compiled.py): the produce request
# is encoded once per request on the sender's path. It declares no C types.
