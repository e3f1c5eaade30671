"""Run by the interpreter of a venv where es-broker was installed without a C compiler.

Checks that the install left the compiled hot path out and runs the pure-Python reference:
the package imports, `es-broker serve` starts with the one warning saying so as its first
log line, a topic is created, one message goes in and comes back out, and SIGTERM stops it.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from es_broker import compiled

level, line = compiled.status()
assert level == logging.WARNING and "not built" in line, (level, line)
assert not any(compiled.active().values()), compiled.active()

bin_dir = Path(sys.executable).parent
es_broker = str(bin_dir / "es-broker")
with tempfile.TemporaryDirectory(prefix="es-broker-pure-") as tmp:
    serve = subprocess.Popen(
        [
            es_broker,
            "serve",
            "--data-dir",
            f"{tmp}/data",
            "--listen",
            "127.0.0.1:0",
            "--namesrv-listen",
            "127.0.0.1:0",
            "--readmodel-url",
            "none",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert serve.stdout is not None
    lines = []
    namesrv = ""
    for out in serve.stdout:  # until the broker's ready line (or the process ends)
        lines.append(out.rstrip())
        if "name server listening on " in out:
            namesrv = out.split("listening on ")[1].split()[0]
        if " data in " in out:
            break
    assert namesrv and lines and "hot path: the pure-Python reference" in lines[0], lines

    def admin(*args: str) -> object:
        done = subprocess.run(
            [es_broker, "admin", "-n", namesrv, *args, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return json.loads(done.stdout)

    admin("updateTopic", "-c", "DefaultCluster", "-t", "PureTopic", "-w", "1", "-r", "1")
    admin("sendMessage", "-t", "PureTopic", "-p", "pure body", "-k", "k1")
    got = admin("consumeMessage", "-t", "PureTopic", "-c", "1")
    assert "pure body" in json.dumps(got), got
    serve.send_signal(signal.SIGTERM)
    rest, _ = serve.communicate(timeout=60)
    assert serve.returncode == 0, (serve.returncode, rest)
print("pure-Python install: imports, serves, sends and consumes:", line.split(":")[0])
