# Marks adapter.py for compilation as it is (see aioaccum/_compiled.py); it declares no C types.
