"""report.html: one self-contained page per run (verdict, finding cards, timelines, stacks, loaders), no script.

The page is built from the same report dict as the terminal and report.json, plus a bounded `Timeline` (the run's
series downsampled, every event kept) built from the loaded run by analysis.report.timeline; the page reads neither the
run nor its directory. Everything that came from the run directory is user data and is escaped; the
Content-Security-Policy forbids every network load and every script.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from dlprobe.analysis.report.build import cleanup_lines, probe_cost_line
from dlprobe.analysis.report.schema import FindingEntry, Report
from dlprobe.analysis.report.timeline import KIND_LINES, Timeline
from dlprobe.render.html_page import _fmt, _rich_text, esc, page, scroll_box, value_html, write_page
from dlprobe.render.projection_chart import projection_chart, projection_views
from dlprobe.render.readings import as_read, clipped_note
from dlprobe.render.svg import PALETTE, Chart, Line, Marker, Readings, chart_svg, legend_html
from dlprobe.units import NOT_READ, MiB, format_bytes

# --- the page: its sections (the primitives they share with the other pages are in html_page.py) --------------


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _verdict_status(report: Report) -> tuple[str, str]:
    """The verdict's colour class and sentence: the most severe finding first, then the exit code. A run that
    exits 0 with a warning is not healthy, and a bar coloured by the exit code alone would say it is."""
    code, sig = report["exit_code"], report["signal"]
    findings = report["findings"]
    by_sev: dict[str, list[str]] = {}
    for f in findings:
        by_sev.setdefault(f["severity"], []).append(f["code"])
    errors, warnings = by_sev.get("error", []), by_sev.get("warning", [])
    if code is None:
        ran = "no exit status recorded (still running, or the supervisor was killed)"
    elif code == 0 and not sig:
        ran = "the script finished: exit code 0"
    else:
        ran = f"the script failed: exit code {code}" + (f" ({sig})" if sig else "")
    exited_badly = code is not None and (code != 0 or bool(sig))
    if errors or exited_badly:
        cls, word = "error", "Failed" if exited_badly else "Problem found"
    elif warnings or code is None:  # an unknown end is not a clean one either
        cls, word = "warning", "Needs a look"
    else:
        cls, word = "ok", "Healthy"
    found = [_count(len(errors), "error")] if errors else []
    found += [_count(len(warnings), "warning")] if warnings else []
    if found:
        named = ", ".join(dict.fromkeys([*errors, *warnings]))  # most severe first, each code once
        status = f"{ran}; {' and '.join(found)} found ({named})"
    elif findings:
        status = f"{ran}; only notes found"
    else:
        status = f"{ran}; no problem found"
    return cls, f"{word} \u2014 {status}"


def _verdict(report: Report, timeline: Mapping[str, Any] | None, check: dict[str, Any] | None) -> str:
    code, sig = report["exit_code"], report["signal"]
    cls, status = _verdict_status(report)
    machine = report["machine"]
    rows = [
        ("exit code", "not recorded" if code is None else code),
        ("signal", sig or "none"),
        ("duration", "not measured" if (duration := report["duration_s"]) is None else f"{duration:.1f} s"),
        (
            "machine",
            ", ".join(
                f"{k} {_fmt(k, v)}"
                for k, v in (
                    ("host", machine.get("host")),
                    ("python", machine.get("python")),
                    ("cores", machine.get("usable_cores")),
                    ("memory", format_bytes(machine["mem_total"]) if machine.get("mem_total") else None),
                    ("/dev/shm", format_bytes(machine["shm_total"]) if machine.get("shm_total") else None),
                )
                if v is not None
            )
            or "not recorded",
        ),  # fmt: skip
        ("run directory", report["run_dir"] or "not recorded"),
        ("probe", probe_cost_line(report) or "not measured"),
    ]
    rows.extend(_memory_rows(timeline or {}))
    rows.extend(("cleaned up", line) for line in cleanup_lines(report))
    if timeline and timeline.get("cwd"):
        rows.append(("working directory", timeline["cwd"]))
    # paths (the run directory, the cgroup) may wrap after a "/": at 800 px a cgroup path is wider than the page
    table = "".join(f"<tr><th scope=row>{esc(k)}</th><td>{_breakable(str(v), '/')}</td></tr>" for k, v in rows)
    parts = [f'<section id="verdict" class="verdict {cls}"><h2>Verdict</h2>{_cause(report)}'
             f'<p class="status {cls}">{esc(status)}</p>']  # fmt: skip
    if check is not None:
        passed = check.get("passed")
        parts.append(f'<p class="status {"ok" if passed else "error"}">dlprobe check: '
                     f'{"passed" if passed else "failed"} (exit code {esc(check.get("exit_code"))})</p>')  # fmt: skip
    parts.append(scroll_box(f'<table class="kv">{table}</table>'))
    if timeline and timeline.get("reproduce"):
        parts.append(f'<p>To reproduce:</p><pre class="code">{esc(timeline["reproduce"])}</pre>')
    parts.append("</section>")
    return "".join(parts)


def _cause(report: Report) -> str:
    """The page's first words: the one cause that explains the most of what went wrong, and the change to make."""
    verdict = report.get("verdict")
    if not verdict:
        return ""
    return (
        f'<p class="cause {esc(verdict["severity"])}" data-code="{esc(verdict["code"])}">'
        f"<code>{esc(verdict['code'])}</code>: "
        f"<strong>{_rich_text(verdict['sentence'])}</strong></p>"
        f'<div class="fix"><strong>Fix:</strong> {_rich_text(verdict["fix"])}</div>'
    )


def _memory_rows(timeline: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The job's own memory beside its cgroup's, from the charted series so the numbers are the charts' peaks."""
    rows = []
    job = timeline.get("job_pss") or []
    if job:
        rows.append(("the job's own memory", f"peak {format_bytes(max(y for _, y in job) * MiB)} ({JOB_PSS_SUM})"))
    cgroup = timeline.get("cgroup") or {}
    if cgroup.get("usage"):
        value = f"peak {format_bytes(max(y for _, y in cgroup['usage']) * MiB)}"
        if cgroup.get("limit"):
            value += f" of its limit {format_bytes(cgroup['limit'])}"
        rows.append((CGROUP_MEMORY, f"{value} ({cgroup_scope(cgroup.get('path'))})"))
    return rows


def _check_rules(check: dict[str, Any]) -> str:
    rows = "".join(
        f'<tr class="{esc(r.get("status"))}"><td>{esc(r.get("rule"))}</td><td>{esc(r.get("threshold"))}</td>'
        f"<td>{esc(r.get('observed'))}</td><td><strong>{esc(r.get('status'))}</strong></td>"
        f"<td>{_rich_text(r.get('message') or '')}</td><td>{esc(r.get('source'))}</td></tr>"
        for r in check.get("rules") or []
    )
    table = ('<table class="ev"><thead><tr><th>rule</th><th>limit</th><th>observed</th><th>verdict</th>'
             f"<th>message</th><th>from</th></tr></thead><tbody>{rows}</tbody></table>")  # fmt: skip
    return f'<section id="check"><h2>Check rules</h2>{scroll_box(table)}</section>'


def findings_section(findings: list[FindingEntry]) -> str:
    if not findings:
        return '<section id="findings"><h2>Findings</h2><p>No finding: nothing in this run looked wrong.</p></section>'
    cards = []
    for f in findings:
        sev, code, loader, evidence = f["severity"], f["code"], f["loader_id"], f["evidence"]
        cards.append(
            f'<article class="card {esc(sev)}" id="finding-{esc(code)}" data-code="{esc(code)}">'
            f'<h3><span class="sev">{esc(sev.upper())}</span> <code>{esc(code)}</code>'
            f"{f' <span class=loader>loader {esc(loader)}</span>' if loader is not None else ''}</h3>"
            f'<p class="title">{_rich_text(f["title"])}</p>' + _cause_note(f) + f"<p>{_rich_text(f['detail'])}</p>"
            f'<div class="fix"><strong>Fix:</strong> {_rich_text(f["fix"])}</div>'
            + (
                f"<details{' open' if sev == 'error' else ''}><summary>Evidence</summary>"
                f"{scroll_box(value_html('evidence', evidence))}</details>"
                if evidence
                else ""
            )
            + "</article>"
        )
    return f'<section id="findings"><h2>Findings ({len(findings)})</h2>{"".join(cards)}</section>'


def _cause_note(finding: FindingEntry) -> str:
    """Where a finding stands among the others: which finding explains it, and why its severity was raised."""
    notes = []
    if finding.get("explained_by"):
        code = esc(finding["explained_by"])
        notes.append(f"Explained by <code>{code}</code> (above).")
    if finding.get("severity_reason"):
        notes.append(f"{esc(finding['severity'].capitalize())}: {esc(finding['severity_reason'])}.")
    return f'<p class="explained">{" ".join(notes)}</p>' if notes else ""


def _line(label: str, points: list[list[float]], color: str, dash: str = "solid") -> Line:
    return Line(label, [(float(x), float(y)) for x, y in points], color, dash)


def _readings(label: str, points: list[list[float]], color: str, dash: str = "solid",
              bound: float | None = None) -> Readings:  # fmt: skip
    """A sampled series as read: a dot per reading, the band between two readings, nothing above `bound` (MiB)."""
    return Readings(label, as_read(((float(x), float(y)) for x, y in points), bound), color, dash)


def _deaths(report: Report) -> dict[int, str]:
    """Why each dead worker died, as its finding says (the timeline only knows when its pid vanished)."""
    out = {}
    for f in report["findings"]:
        ev = f["evidence"]
        if f["code"] == "worker-killed":
            signal = ev.get("signal")
            how = f"killed: {ev.get('cause')}" + (f" ({signal})" if signal else "")
            out.update({pid: how for pid in ev.get("pids") or []})
    return out


def _timeline_events(report: Report, timeline: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The timeline's events, each dead worker's with the cause its finding gives."""
    deaths = _deaths(report)
    events = []
    for e in timeline.get("events") or []:
        if e.get("pid") in deaths:
            e = {**e, "what": f"{e.get('name')} {deaths[e['pid']]}", "severity": "error"}
        events.append(e)
    return events


def timeline_charts(report: Report, timeline: Mapping[str, Any], notes: list[str]) -> list[Chart]:
    """What the timeline section draws, as chart data (render/svg.py draws it): memory per process, by kind of page,
    the machine's /dev/shm, cgroup and job memory, each sampled series as read (render/readings.py: a dot per reading,
    the band between two, nothing above the cgroup's limit, said under the chart when a reading was), the memory
    projections (render/projection_chart.py) and the loop's wait per batch. What it cannot draw goes to `notes`."""
    events = _timeline_events(report, timeline)
    markers = [Marker(float(e["t"]), f"{i + 1}: {e['what']}", e.get("severity", "info")) for i, e in enumerate(events)]
    xs = [float(x) for p in timeline.get("processes") or [] for k in ("uss", "rss") for x, _ in p.get(k) or []]
    xs += [float(e["t"]) for e in events] + [float(x) for x, _ in (timeline.get("shm") or {}).get("used") or []]
    if timeline.get("t_end") is not None:
        xs.append(float(timeline["t_end"]))
    x_range = (min(0.0, *xs), max(xs)) if xs else None
    out: list[Chart] = []
    cgroup = timeline.get("cgroup") or {}
    # The cgroup's limit is one the kernel enforces: no reading of memory it charges is drawn above it.
    limit = cgroup["limit"] / MiB if cgroup.get("limit") else None
    mem = Chart(f"Memory per process: USS ({ROUND_DOT} private to it), RSS ({SQUARE_DOT} counts shared pages)",
                "MiB", markers=markers, x_range=x_range)  # fmt: skip
    kinds = Chart(f"Workers by kind of page (PSS): anonymous ({ROUND_DOT} heap, copy-on-write), file and shm "
                  f"({SQUARE_DOT})", "MiB of PSS", markers=markers, x_range=x_range)  # fmt: skip
    for i, p in enumerate(timeline.get("processes") or []):
        color = PALETTE[i % len(PALETTE)]
        if p.get("uss"):
            mem.readings.append(_readings(f"{p['name']} USS", p["uss"], color, bound=limit))
        if p.get("rss"):  # RSS counts file pages another cgroup may be charged for: not bounded by this one's limit
            mem.readings.append(_readings(f"{p['name']} RSS", p["rss"], color, "dotted"))
        if p.get("role") == "worker":
            for metric, dash, kind in KIND_LINES:
                if p.get(metric):
                    kinds.readings.append(_readings(f"{p['name']} {kind}", p[metric], color, dash))
    if cgroup.get("limit"):
        mem.hlines.append((cgroup["limit"] / MiB, f"memory limit (cgroup) {format_bytes(cgroup['limit'])}"))
        mem.notes.extend(n for r in mem.readings if (n := clipped_note(r.label, r.data, "cgroup limit")))
    if mem.readings:
        out.append(mem)
    else:
        notes.append("no memory sample of the main process or a worker (the script ended before the first sample, "
                     "or it created no DataLoader workers)")  # fmt: skip
    if kinds.readings:
        out.append(kinds)
    elif any(p.get("role") == "worker" for p in timeline.get("processes") or []):
        notes.append("memory by kind of page: this run did not record it (an older dlprobe, or smaps_rollup "
                     "was not readable)")  # fmt: skip
    system = Chart("Machine: /dev/shm use", "MiB", markers=markers, x_range=x_range)
    shm = timeline.get("shm") or {}
    if shm.get("used"):
        total = shm.get("total")
        label = "/dev/shm used" + (f" (size {format_bytes(total)})" if total else "")
        system.readings.append(_readings(label, shm["used"], "#6A3D9A", bound=total / MiB if total else None))
        # the capacity only when use comes near it: otherwise it flattens the line that matters
        if total and max(y for _, y in shm["used"]) > 0.25 * total / MiB:
            system.hlines.append((total / MiB, f"/dev/shm size {format_bytes(total)}"))
    if cgroup.get("usage"):
        system.title = "Machine: /dev/shm use and the container's (cgroup's) memory"
        system.readings.append(_readings(cgroup_label(cgroup.get("path")), cgroup["usage"], "#B15928", "dotted",
                                         bound=limit))  # fmt: skip
        if timeline.get("job_pss"):  # the cgroup counts every process in it (a container: all of it); the job's own
            system.title = "Machine: /dev/shm use, the container's (cgroup's) memory and the job's own"
            job = _readings(JOB_PSS_LABEL, timeline["job_pss"], "#1B9E77", bound=limit)
            over = timeline.get("job_pss_over_limit") or {}
            if over.get("readings"):  # the timeline drew them at the limit already; the chart says so
                job = Readings(job.label, replace(job.data, clipped=over["readings"], highest=over["highest"]),
                               job.color, job.dash)  # fmt: skip
            system.readings.append(job)
        if cgroup.get("limit"):
            system.hlines.append((cgroup["limit"] / MiB, f"cgroup limit {format_bytes(cgroup['limit'])}"))
    for r in system.readings:  # /dev/shm is bounded by its size (tmpfs enforces it), the rest by the cgroup's limit
        if note := clipped_note(r.label, r.data, "/dev/shm size" if r.label.startswith("/dev/shm") else "cgroup limit"):
            system.notes.append(note)
    if system.readings:
        out.append(system)
    out.extend(projection_chart(view) for view in projection_views(report["findings"]))
    waits = Chart("The loop's wait per batch (batches reported in groups: times within a group are spread)",
                  "ms", markers=markers, x_range=x_range, y_format="{:,.1f}")  # fmt: skip
    for i, w in enumerate(timeline.get("waits") or []):
        waits.lines.append(
            _line(f"loader {w['loader']} ({w['batches']:,} batches)", w["points"], PALETTE[i % len(PALETTE)])
        )
    if waits.lines:
        out.append(waits)
    return out


def _charts(report: Report, timeline: Mapping[str, Any], notes: list[str]) -> str:
    events = _timeline_events(report, timeline)
    out = [_figure(chart) for chart in timeline_charts(report, timeline, notes)]
    if events:
        rows = "".join(f'<tr class="{esc(e.get("severity"))}"><td>{i + 1}</td><td>{float(e["t"]):.2f} s</td>'
                       f"<td>{esc(e['what'])}</td></tr>" for i, e in enumerate(events))  # fmt: skip
        table = (f'<table class="ev"><thead><tr><th>#</th><th>time</th><th>what happened</th></tr></thead>'
                 f"<tbody>{rows}</tbody></table>")  # fmt: skip
        out.append(f"<details open><summary>Events ({len(events)}), numbered as on the charts</summary>"
                   f"{scroll_box(table)}</details>")  # fmt: skip
    if not out:
        return ""
    return f'<section id="timeline"><h2>Timeline</h2>{"".join(out)}</section>'


JOB_PSS_SUM = "sum of its processes' PSS"
ROUND_DOT = "\u25cf"  # how a chart's legend tells a reading's dot: round for USS and anonymous pages
SQUARE_DOT = "\u25a0"  # square for RSS, file and shm pages
# Under every chart of readings: a straight line between two readings would draw what was never read.
AS_READ = (
    "Dots: the readings. Shaded: between two readings, from the lower to the higher of them; what the memory "
    "did in between was not read."
)
JOB_PSS_LABEL = f"the job's own memory ({JOB_PSS_SUM})"
CGROUP_MEMORY = "container/cgroup memory"


def cgroup_scope(path: Any) -> str:
    """The cgroup's use is every process in that cgroup (the whole container when dlprobe runs in one), not the
    job's: its label says so, with the cgroup's path when the run recorded it."""
    return f"all processes in {path}" if path else "all processes in the cgroup"


def cgroup_label(path: Any) -> str:
    return f"{CGROUP_MEMORY} ({cgroup_scope(path)})"


def _figure(chart: Chart) -> str:
    if chart.readings:
        chart.notes.insert(0, AS_READ)
    return f"<figure>{chart_svg(chart)}{legend_html(chart)}</figure>"


def _stacks(timeline: Mapping[str, Any]) -> str:
    out = []
    for hang in timeline.get("hangs") or []:
        procs = []
        for p in hang.get("processes") or []:
            who = (f"worker {p.get('worker_id')} (pid {p.get('pid')})" if p.get("role") == "worker"
                   else f"{p.get('role')} (pid {p.get('pid')})")  # fmt: skip
            threads = (
                "".join(
                    f"<p>thread {esc(th.get('name') or '?')} (innermost frame first; >> marks your code):</p>"
                    f"<pre>{esc(chr(10).join(th.get('frames') or []))}</pre>"
                    for th in p.get("threads") or []
                )
                or f"<p>no stack ({esc(p.get('error') or 'not dumped')})</p>"
            )
            awaited = p.get("role") == "worker" and p.get("worker_id") == hang.get("awaited_worker")
            if awaited:
                who += ", the worker the loop was waiting for"
            procs.append(f"<details{' open' if awaited else ''}><summary>{esc(who)} (state "
                         f"{esc(p.get('state') or '?')})</summary>{threads}</details>")  # fmt: skip
        problem = hang.get("problem")
        note = f"<p class=note>{esc(problem.get('advice') or problem)}</p>" if isinstance(problem, dict) else ""
        out.append(f"<details open><summary>Hang {esc(hang.get('number'))}: no batch for {esc(hang.get('waited_s'))} s"
                   f"</summary>{note}{''.join(procs)}</details>")  # fmt: skip
    hot = timeline.get("hotspots") or []
    if hot:
        procs = []
        for h in hot:
            rows = "".join(f"<tr><td>{s['count']}</td><td><pre>{esc(chr(10).join(s['frames']))}</pre></td></tr>"
                           for s in h["stacks"])  # fmt: skip
            table = ('<table class="ev"><thead><tr><th>samples</th><th>stack (innermost last)</th></tr></thead>'
                     f"<tbody>{rows}</tbody></table>")  # fmt: skip
            procs.append(f"<details><summary>{esc(h['name'])}: {h['samples']} samples</summary>"
                         f"{scroll_box(table)}</details>")  # fmt: skip
        out.append(
            "<details><summary>Hotspots: where each process spent its time (py-spy)</summary>"
            f"{''.join(procs)}</details>"
        )
    if not out:
        return ""
    return f'<section id="stacks"><h2>Stacks</h2>{"".join(out)}</section>'


def _job(report: Report) -> str:
    """A multi-rank job's sections ("job", "ranks" in report.json), as tables until they get their own view."""
    job: dict[str, Any] | None = None
    if "job" in report:
        # A node's total over time is a series, drawn on its run's page as the job's own memory: as numbers in a
        # table cell it made the row a screen tall.
        nodes = [{k: v for k, v in n.items() if k != "pss_total"} for n in report["job"]["nodes"]]
        job = {**report["job"], "nodes": nodes}
    parts = [f"<h3>{esc(key)}</h3>{scroll_box(value_html(key, value))}"
             for key, value in (("job", job), ("ranks", report.get("ranks"))) if value]  # fmt: skip
    return f'<section id="job"><h2>Job and ranks</h2>{"".join(parts)}</section>' if parts else ""


def _loaders(report: Report) -> str:
    loaders = report["loaders"]
    if not loaders:
        return (
            '<section id="loaders"><h2>DataLoaders</h2>'
            "<p>The script created no DataLoader that dlprobe saw.</p></section>"
        )
    cols: tuple[str, ...] = (
        "loader_id", "dataset_type", "dataset_len", "batch_size", "num_workers", "start_method", "pin_memory",
        "prefetch_factor", "persistent_workers", "epochs", "batches", "wait_fraction", "first_batch_s",
    )  # fmt: skip
    if any(lo.get("rank") for lo in loaders):  # a job: each rank has its own "loader 0"
        cols = ("rank", *cols)
    head = "".join(f"<th scope=col>{_breakable(c)}</th>" for c in cols)
    rows: list[Mapping[str, object]] = list(loaders)  # read by column name: every column is a key of LoaderEntry
    body = "".join("<tr>" + "".join(f"<td>{_loader_cell(c, lo.get(c))}</td>" for c in cols) + "</tr>"
                   for lo in rows)  # fmt: skip
    table = f'<table class="ev"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    return f'<section id="loaders"><h2>DataLoaders</h2>{scroll_box(table)}</section>'


# A loader's setting that is None is a setting, not a gap in the readings: torch leaves prefetch_factor and the
# start method unset without workers, and a dataset without __len__ has no length.
_UNSET_SETTING = {"prefetch_factor": "none", "start_method": "none", "dataset_len": "no __len__"}


def _loader_cell(column: str, value: Any) -> str:
    """One cell as HTML; only the dataset's dotted path may wrap (a number broken at its decimal point misreads)."""
    if value is None and column in _UNSET_SETTING:
        return esc(_UNSET_SETTING[column])
    return _breakable(_fmt(column, value)) if column == "dataset_type" else esc(_fmt(column, value))


def _breakable(text: str, after: str = "_.") -> str:
    """Escaped, with a line break allowed after each of `after`: the loaders' column names (report.json's keys),
    dataset paths and cgroup paths are long words, and a table that may wrap them fits the page instead of
    scrolling."""
    return re.sub(f"([{re.escape(after)}])", r"\1<wbr>", esc(text))


def _processes(report: Report) -> str:
    procs = report["processes"]
    if not procs:
        return ""
    head = "".join(
        f"<th scope=col>{c}</th>"
        for c in ("process", "pid", "RSS peak", "USS start", "USS peak", "USS end", "PSS peak")
    )
    rows = []
    for p in procs:
        role = p["role"]
        name = (
            f"loader {p['loader_id']} worker {p['worker_id']}"
            if role == "worker"
            else role
            if role == "main"
            else f"other: {p['comm'] or '?'}"
        )
        if rank := p.get("rank"):  # a job: each rank has its own main process and "loader 0 worker 0"
            name = f"{rank} {name}"
        uss, rss, pss = p["uss"], p["rss"], p["pss"]
        peaks = (rss["peak"], uss["start"], uss["peak"], uss["end"], pss["peak"])
        missing = NOT_READ if p.get("memory_unread") else "not measured"  # refused, or not taken
        cells = (name, p["pid"], *(missing if v is None else format_bytes(v) for v in peaks))
        rows.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    table = f'<table class="ev"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    return f'<section id="processes"><h2>Memory per process</h2>{scroll_box(table)}</section>'


def render_html(
    report: Report,
    timeline: Timeline | None = None,
    check: dict[str, Any] | None = None,
    problems: list[str] | None = None,
) -> str:
    """The whole page; a section that cannot be drawn becomes a line saying so, never a broken page."""
    notes = list(problems or [])
    title = " ".join([report["script"] or "?", *report["argv"]])
    if timeline is None:
        notes.append("the timeline: the run's samples and events were not available")
    elif timeline.get("hotspots_problem"):
        notes.append(str(timeline["hotspots_problem"]))
    if timeline is not None and timeline.get("probe_started") is False:
        notes.append("the probe never started inside the script (it failed before its first line), so there are "
                     "no loaders, batches or worker readings")  # fmt: skip
    sections: list[tuple[str, Callable[[], str]]] = [
        ("the verdict", lambda: _verdict(report, timeline, check)),
        ("the check rules", lambda: _check_rules(check) if check is not None else ""),
        ("the findings", lambda: findings_section(report["findings"])),
        ("the timeline", lambda: _charts(report, timeline, notes) if timeline is not None else ""),
        ("the stacks", lambda: _stacks(timeline) if timeline is not None else ""),
        ("the job", lambda: _job(report)),
        ("the loaders", lambda: _loaders(report)),
        ("the processes", lambda: _processes(report)),
    ]
    body = []
    for name, build in sections:
        try:
            body.append(build())
        except Exception as exc:  # one bad section must not cost the page: say what is missing instead
            notes.append(f"{name}: {type(exc).__name__}: {exc}")
    tail = timeline.get("stderr_tail") if timeline is not None else None
    not_kept = timeline.get("stderr_not_kept") if timeline is not None else None
    if tail:
        body.append(f'<section id="stderr"><h2>Script output</h2><details><summary>The end of stderr.log</summary>'
                    f"<pre>{esc(tail)}</pre></details></section>")  # fmt: skip
    elif not_kept:
        body.append(f'<section id="stderr"><h2>Script output</h2><p>{esc(not_kept)}</p></section>')
    footer = f"from {esc(report['run_dir'])}. Every number here is also in report.json."
    return page(f"dlprobe report: {title}", body, notes, report["dlprobe_version"], footer)


def write_html(path: Path, report: Report, timeline: Timeline | None = None,
               check: dict[str, Any] | None = None, problems: list[str] | None = None) -> Path:  # fmt: skip
    """Write the page atomically (a reader never sees half a page)."""
    write_page(path, render_html(report, timeline, check, problems))
    return path


def html_problem(
    path: Path,
    report: Report,
    timeline: Timeline | None = None,
    check: dict[str, Any] | None = None,
    problems: list[str] | None = None,
) -> list[str]:
    """Write the page; what went wrong, for the terminal. `problems` are named on the page (a timeline that could not
    be built: the report's own sections still make a useful page)."""
    try:
        write_html(path, report, timeline, check, problems)
    except Exception as exc:  # the page is a view: report.json, already written, must not be lost for it
        return [f"could not write {path.name}: {type(exc).__name__}: {exc}"]
    return []
