"""Ctrl-C is Ctrl-C wherever it lands: inside confluent-kafka's C code it arrives as a
``SystemError`` caused by the KeyboardInterrupt, which ``ctrl_c_unwrapped`` turns back (else
the CLI exits 1 with a traceback instead of 130 with what it found)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.support import sigint_as_in_a_terminal

# A child interrupts itself every 2 ms while its main thread creates topics (no broker needed:
# the admin client returns the futures at once), once bare and once unwrapped, and counts what
# each interrupt came out as. An interrupt raises only inside the call armed for it, once: one
# landing in the counting itself would end the child.
CHILD = textwrap.dedent(
    """
    import contextlib, json, os, signal, threading, time
    from confluent_kafka.admin import AdminClient, NewTopic
    from harness.environment.signals import ctrl_c_unwrapped

    client = AdminClient({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    firing, stopped = threading.Event(), threading.Event()
    armed = False

    def interrupter():
        firing.wait()
        while not stopped.is_set():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.002)

    def ctrl_c_once(signum, frame):
        global armed
        if armed:  # Python's own handler raises it so
            armed = False
            raise KeyboardInterrupt

    def count(wrapper, wanted=50, deadline_s=60.0):
        global armed
        seen = {"KeyboardInterrupt": 0, "SystemError": 0}
        signal.signal(signal.SIGINT, ctrl_c_once)
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
                except (KeyboardInterrupt, SystemError) as exc:
                    seen[type(exc).__name__] += 1
        finally:
            armed = False
            stopped.set()
            thread.join()
            firing.clear()
            signal.signal(signal.SIGINT, signal.default_int_handler)
        return seen

    print(json.dumps({"bare": count(contextlib.nullcontext), "unwrapped": count(ctrl_c_unwrapped)}))
    """
)


def test_ctrl_c_inside_the_kafka_clients_c_code_comes_out_as_keyboard_interrupt() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
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
    # ... unwrapped, every interrupt is a KeyboardInterrupt.
    assert unwrapped == {"KeyboardInterrupt": 50, "SystemError": 0}, done.stdout
