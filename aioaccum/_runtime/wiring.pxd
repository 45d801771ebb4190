# Marks wiring.py for compilation as it is (see setup.py); it declares no C types.
