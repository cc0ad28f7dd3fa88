"""The `process` event says whether this process began its own program or is a fork of one that loaded the probe:
a fork shares its parent's heap (the node's memory total must not count it twice), an exec'd rank does not."""

from __future__ import annotations

import json
import os

from dlprobe.in_training import identity


def test_the_program_itself_is_not_a_fork_and_a_fork_of_it_is() -> None:
    assert identity.current()["forked"] is False
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: say what it is, and leave at once (no test teardown runs here)
        try:
            os.write(write, json.dumps(identity.current()["forked"]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert said is True
