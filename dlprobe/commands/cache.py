"""`dlprobe cache list|clear`: the arrays `dlprobe.fixes.shm_array` keeps in /dev/shm across runs."""

from __future__ import annotations

from typing import Any

import typer

from dlprobe.commands.options import DlprobeCommand
from dlprobe.errors import DlprobeError

app = typer.Typer(
    name="cache",
    help="Show or remove the arrays dlprobe.fixes keeps in /dev/shm (shm_array, PackedRecords(share=...)).",
    no_args_is_help=True,
)


def _free(root: Any) -> tuple[int | None, int | None]:
    import os

    try:
        st = os.statvfs(root)
    except OSError:
        return None, None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


@app.command("list", cls=DlprobeCommand)
def list_cache() -> None:
    """List cached arrays: key, size, age, and which processes map them now."""
    from dataclasses import asdict

    from dlprobe.console import out_console
    from dlprobe.fixes import cache_dir as layout
    from dlprobe.render.cache_table import cache_summary

    root = layout.open_cache_dir(create=False) or layout.cache_dir()  # refuses another user's directory
    free, total = _free(root if root.exists() else root.parent)
    found = layout.entries(root) if root.exists() else []
    entries = [{**asdict(e), "age_s": e.age_s} for e in found if e.problem is None]
    console = out_console()
    console.print(cache_summary({"dir": str(root), "free_bytes": free, "total_bytes": total, "entries": entries}))
    for e in found:
        if e.problem is not None:
            console.print(f"untrusted entry {e.key}: {e.problem}; remove it with `dlprobe cache clear {e.key}`",
                          soft_wrap=True, markup=False, highlight=False)  # fmt: skip


@app.command("clear", cls=DlprobeCommand)
def clear(
    key: str | None = typer.Argument(None, help="The array to remove; all of them when left out."),
    force: bool = typer.Option(False, "--force", help="Remove arrays that running processes still map."),
) -> None:
    """Remove cached arrays (all, or KEY). Arrays that running processes map are kept unless --force."""
    from dlprobe.console import out_console
    from dlprobe.fixes import cache_dir as layout
    from dlprobe.units import format_bytes

    root = layout.open_cache_dir(create=False) or layout.cache_dir()  # refuses another user's directory
    entries = layout.entries(root) if root.exists() else []
    if key is not None:
        try:
            layout.check_key(key)
        except ValueError as exc:
            raise DlprobeError(str(exc), "list the keys with `dlprobe cache list`") from exc
        entries = [e for e in entries if e.key == key]
        if not entries:
            raise DlprobeError(f"no cached array {key!r} in {root}", "list the keys with `dlprobe cache list`")
    console = out_console()
    kept = []
    for e in entries:
        if e.pids and not force:
            kept.append(e)
            continue
        if not layout.remove(root, e.key):
            kept.append(e)
            console.print(f"kept {e.key}: a process is building it right now")
            continue
        note = f" (still mapped by {len(e.pids)} processes: freed when they exit)" if e.pids else ""
        note += " (untrusted: not this user's file)" if e.problem else ""
        console.print(f"removed {e.key} ({format_bytes(e.nbytes)}){note}", soft_wrap=True)
    mapped = [e for e in kept if e.pids]
    if mapped:
        names = ", ".join(f"{e.key} (pids {', '.join(map(str, e.pids[:6]))})" for e in mapped)
        raise DlprobeError(
            f"not removed: {names} still mapped by running processes",
            "stop them first, or pass --force (the memory is freed only when they exit)",
            exit_code=1,
        )
    if not entries:
        console.print(f"No cached arrays in {root}.")
