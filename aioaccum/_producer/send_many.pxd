# Marks send_many.py for compilation as it is (see setup.py); it declares no C types. It is
# the loop of send_many over a call's records, compiled as the producer is.
from aioaccum._core._cgc cimport gc_untrack
