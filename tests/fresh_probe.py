"""What :mod:`tests.test_fresh_process` reads of a forked command's process: run as
``python -m tests.fresh_probe ARGS``, it prints its working directory, ``sys.argv``,
``sys.path[0]``, one environment variable, whether any of trainplan's modules was imported before
it ran, and exits with the code its first argument gives (writing the second to stderr)."""

import json
import os
import sys

print(
    json.dumps(
        {
            "cwd": os.getcwd(),
            "argv": sys.argv[1:],
            "argv0": sys.argv[0],
            "path0": sys.path[0],
            "env": os.environ.get("TRAINPLAN_PROBE"),
            "trainplan": sorted(m for m in sys.modules if m.split(".")[0] == "trainplan"),
            "main": sys.modules["__main__"].__spec__.name,
        }
    )
)
print(sys.argv[2], file=sys.stderr)
sys.exit(int(sys.argv[1]))
