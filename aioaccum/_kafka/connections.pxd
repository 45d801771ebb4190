# Marks connections.py for compilation as it is (see aioaccum/_compiled.py): every produce
# request passes through ProduceConnections.send_produce on its way to its node's connection.
# It declares no C types.
