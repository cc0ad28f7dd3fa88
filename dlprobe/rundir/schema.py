"""The run-directory contract: every file name, cross-process env var, event kind and record shape, defined once.

Both sides import from here: the writer (in_training, running inside the user's script) and the readers
(supervisor, analysis, commands). This module holds the contract's version and gathers its parts, each owning one
kind of name, so that `from dlprobe.rundir.schema import X` (and `vars(schema)`, which validate.py and the tests
read) reaches every one of them:

- layout.py: the run directory's file and folder names (RUN_DIR_NAMES)
- environment.py: the DLPROBE_* variables the supervisor sets for the target, and what else both sides agree on
- kinds.py: event kinds (EV_*), sample kinds (SAMPLE_*) and the fixed values fields take
- events.py, start_events.py, takeover_events.py: the TypedDicts of events.jsonl's lines
- file_records.py: the TypedDicts of samples.jsonl, hang records, meta.json, result.json and the other files

None of them imports anything heavy, so the target can import the whole contract cheaply.
"""

# No `from __future__ import annotations` here or in the parts: a TypedDict's string annotations are each compiled
# into a ForwardRef when the class is made, which made importing the schema 18 ms instead of 7 of CPU in every
# process that imports it.
from typing import Any

from dlprobe.rundir.environment import *  # noqa: F403
from dlprobe.rundir.events import *  # noqa: F403
from dlprobe.rundir.file_records import *  # noqa: F403
from dlprobe.rundir.file_records import Meta
from dlprobe.rundir.kinds import *  # noqa: F403
from dlprobe.rundir.layout import *  # noqa: F403
from dlprobe.rundir.start_events import *  # noqa: F403
from dlprobe.rundir.takeover_events import *  # noqa: F403

# Bump when a reader of an older dlprobe would misread a run written by this one. Runs without the field
# were written before it existed and are version 1.
RUN_SCHEMA_VERSION = 2
LEGACY_RUN_SCHEMA_VERSION = 1


def run_schema_version(meta: dict[str, Any] | Meta) -> int:
    """The run's schema version; a run written before the field existed is version 1."""
    version = meta.get("schema_version", LEGACY_RUN_SCHEMA_VERSION)
    return version if isinstance(version, int) else LEGACY_RUN_SCHEMA_VERSION
