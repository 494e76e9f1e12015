"""Ctrl-C is Ctrl-C wherever it lands, and SIGTERM SIGTERM: inside confluent-kafka's C code each
arrives as a ``SystemError`` caused by its exception, which ``stops_unwrapped`` turns back (else
the CLI exits 1 with a traceback instead of 130 or 143 with what it found)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.support import sigint_as_in_a_terminal

# A child signals itself every 2 ms while its main thread creates topics (no broker needed:
# the admin client returns the futures at once), once bare and once unwrapped, and counts what
# each interrupt came out as. An interrupt raises only inside the call armed for it, once: one
# landing in the counting itself would end the child.
CHILD = textwrap.dedent(
    """
    import contextlib, json, os, signal, threading, time
    from confluent_kafka.admin import AdminClient, NewTopic
    from harness.environment.signals import Terminated, stops_unwrapped

    SIGNAL, STOP = signal.SIGNAL_NAME, STOP_NAME

    client = AdminClient({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    firing, stopped = threading.Event(), threading.Event()
    armed = False

    def interrupter():
        firing.wait()
        while not stopped.is_set():
            os.kill(os.getpid(), SIGNAL)
            time.sleep(0.002)

    def stop_once(signum, frame):
        global armed
        if armed:  # as Python's own handler and the lab's (stop_on_termination) raise them
            armed = False
            raise KeyboardInterrupt if STOP is KeyboardInterrupt else Terminated(signum)

    def count(wrapper, wanted=50, deadline_s=60.0):
        global armed
        seen = {STOP.__name__: 0, "SystemError": 0}
        previous = signal.signal(SIGNAL, stop_once)
        stopped.clear()
        thread = threading.Thread(target=interrupter)
        thread.start()
        firing.set()
        end = time.monotonic() + deadline_s
        n = 0
        try:
            while sum(seen.values()) < wanted and time.monotonic() < end:
                try:
                    with wrapper():
                        n += 1
                        armed = True
                        client.create_topics([NewTopic(f"t{n}", num_partitions=1)])
                        armed = False
                except (STOP, SystemError) as exc:
                    seen[type(exc).__name__] += 1
        finally:
            armed = False
            stopped.set()
            thread.join()
            firing.clear()
            signal.signal(SIGNAL, previous)
        return seen

    print(json.dumps({"bare": count(contextlib.nullcontext), "unwrapped": count(stops_unwrapped)}))
    """
)


@pytest.mark.parametrize(
    ("sig", "stop"), [(signal.SIGINT, "KeyboardInterrupt"), (signal.SIGTERM, "Terminated")]
)
def test_a_stop_inside_the_kafka_clients_c_code_comes_out_as_itself(
    sig: signal.Signals, stop: str
) -> None:
    child = CHILD.replace("SIGNAL_NAME", sig.name).replace("STOP_NAME", stop)
    done = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=sigint_as_in_a_terminal,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout)
    bare, unwrapped = seen["bare"], seen["unwrapped"]
    # Bare, the C code's disguise shows (else this test would prove nothing) ...
    assert bare["SystemError"] > 0, done.stdout
    # ... unwrapped, every one is the stop it was.
    assert unwrapped == {stop: 50, "SystemError": 0}, done.stdout
