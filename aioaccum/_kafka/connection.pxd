# Marks connection.py for compilation as it is (see aioaccum/_compiled.py): every produce
# request is written and every answer read here. It declares no C types.
