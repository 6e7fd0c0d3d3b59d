"""What a rank can see of how it was started, printed as one JSON line; then it ends
the way its first argument says (tests/test_rankfork.py starts it both ways)."""

import atexit
import json
import os
import sys
import threading
import time

how = sys.argv[1]
mod = sys.modules.get("sitecustomize")
seen = {
    "argv": sys.argv,
    "name": __name__,
    "file": __file__,
    "path": [p for p in sys.path if "site-packages" not in p and "python3" not in p],
    "env": {k: v for k, v in os.environ.items() if k.startswith("PROBE_")},
    "cwd": os.getcwd(),
    "stdin": sys.stdin.read(),
    "sitecustomize": getattr(mod, "__file__", None),
    "pid_is_own": os.getpid() != os.getppid(),
}
print(json.dumps(seen), flush=True)
atexit.register(lambda: print("exit handler ran", flush=True))
if how == "thread":  # the interpreter waits for a non-daemon thread before its exit handlers
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread finished"))).start()
elif how == "exit":
    sys.exit(3)
elif how == "raise":
    raise ValueError("probe failed on purpose")
elif how == "abort":
    os.abort()
print("end of script", file=sys.stderr)
