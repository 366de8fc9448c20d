"""``mininet.examples``: the folder of the script being run, when it is Mininet's examples
folder (an example importing a sibling as ``mininet.examples.X``)."""
import os
import sys

_script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
if _script.endswith(".py") and os.path.isfile(_script):
    __path__.append(os.path.dirname(_script))  # noqa: F821
