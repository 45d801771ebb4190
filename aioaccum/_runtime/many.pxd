# Marks _many.py for compilation as it is (see setup.py); it declares no C types.
from aioaccum._core._cgc cimport gc_untrack
