# Marks from_thread.py for compilation as it is (see setup.py); it declares no C types.
