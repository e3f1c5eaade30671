"""A CPU-time sampler for `es-broker serve`, loaded through PYTHONPATH by bench/cpu_phases.py.

py-spy samples wall-clock time: on a 2-core machine shared with the client, a broker thread
preempted inside a socket write or epoll call is sampled there as if it ran. This sampler
counts CPU time only: ITIMER_PROF fires every ES_BROKER_CPU_SAMPLE_US of the process's CPU
(user + system; in practice at most the kernel's tick rate), and the handler records the
main thread's Python stack (C code is charged to the Python line that called it). SIGUSR2
writes the stacks collected since the last one, collapsed (`frame;frame;... count`, as
`bench/server_cg.py --summarize` reads them), to ES_BROKER_CPU_SAMPLES.N, and starts again.
"""

import os
import sys

if os.environ.get("ES_BROKER_CPU_SAMPLES") and "serve" in sys.argv:
    import collections
    import signal

    _stacks: collections.Counter[str] = collections.Counter()
    _out = os.environ["ES_BROKER_CPU_SAMPLES"]
    _dumps = [0]

    def _where(frame) -> str:
        path = frame.f_code.co_filename
        for root in ("/es_broker/", "/site-packages/", "/lib/python3"):
            at = path.find(root)
            if at >= 0:
                path = path[at + 1 :]
                break
        return f"{frame.f_code.co_qualname} ({path}:{frame.f_lineno})"

    def _sample(signum, frame) -> None:
        parts = []
        while frame is not None:
            parts.append(_where(frame))
            frame = frame.f_back
        _stacks[";".join(reversed(parts))] += 1

    def _dump(signum, frame) -> None:
        _dumps[0] += 1
        with open(f"{_out}.{_dumps[0]}", "w") as out:
            for stack, count in _stacks.items():
                out.write(f"{stack} {count}\n")
        _stacks.clear()

    signal.signal(signal.SIGPROF, _sample)
    signal.signal(signal.SIGUSR2, _dump)
    interval = int(os.environ.get("ES_BROKER_CPU_SAMPLE_US", "1000")) / 1e6
    signal.setitimer(signal.ITIMER_PROF, interval, interval)
