"""Turns bench/run.sh results (JSON lines) into markdown tables and PNG plots.

    report.py RESULTS.jsonl DOC.md PLOT_DIR

Replaces the text between the run.sh markers in DOC.md (adding them after the first paragraph
when absent) and writes PLOT_DIR/*.png. Ratios are ours / peer on throughput or requests/s, so
higher is better for us; a row where we are behind says so.
"""

import json
import os
import statistics
import sys

BEGIN = "<!-- bench/run.sh: begin (generated, edits are overwritten) -->"
END = "<!-- bench/run.sh: end -->"
REPRO = "Reproduce: `bench/run.sh` (this run: `bench/run.sh{}`)."


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def mmm(values, fmt="{:.0f}"):
    v = sorted(values)
    if not v:
        return "–"
    return " / ".join(fmt.format(x) for x in (v[0], statistics.median(v), v[-1]))


def med(values):
    return statistics.median(values) if values else float("nan")


def ratio_cell(ours, peer, goal=None):
    if not ours or not peer:
        return "–"
    r = med(ours) / med(peer)
    cell = f"{r:.2f}×"
    if r < 1.0:
        cell += " (behind)"
    elif goal is not None and r < goal:
        cell += f" (below {goal}× goal)"
    return cell


def mib(kib_values):
    v = [x for x in kib_values if x is not None]
    return f"{max(v) / 1024:.0f} MiB" if v else "–"


# The sides: ours and the distribution peers. `dist` is the main peer (CNCF distribution v3
# since the third wave; in results written before, which have no "peers" in their machine line,
# it was Debian's 2.8), `dist28` the second column.
PEER_NAMES = {"dist": "distribution v3", "dist28": "distribution 2.8"}


def peers_of(results):
    """The peers this run measured, main first."""
    return [p for p in ("dist", "dist28") if any(r.get("server") == p for r in results)]


def cpu_per_gib(rs):
    """Median server CPU seconds per GiB moved, or '–' when the run did not record it."""
    v = [r["server_cpu_s"] / (r["bytes"] / (1 << 30)) for r in rs if r.get("server_cpu_s") is not None and r.get("bytes")]
    return f"{med(v):.2f}" if v else "–"


def per_gib(rs, field):
    """Median of FIELD (CPU seconds) per GiB moved, or '–' when the run did not record it."""
    v = [r[field] / (r["bytes"] / (1 << 30)) for r in rs if r.get(field) is not None and r.get("bytes")]
    return f"{med(v):.2f}" if v else "–"


def cores_busy(rs):
    """Median CPU seconds of server, load client and store (where recorded) per wall second: how
    many of the machine's cores the cell kept busy. Near the core count, the cell is bound by
    CPU, and the CPU columns say whose."""
    v = [
        sum(r.get(f) or 0.0 for f in ("server_cpu_s", "client_cpu_s", "store_cpu_s")) / r["secs"]
        for r in rs
        if r.get("client_cpu_s") is not None and r.get("secs")
    ]
    return f"{med(v):.2f}" if v else "–"


def size_label(size):
    return f"{size >> 20} MiB"


def rows(results, section, **match):
    out = []
    for r in results:
        if r.get("section") != section:
            continue
        if all(r.get(k) == v for k, v in match.items()):
            out.append(r)
    return out


def blob_tables(results, section, goal):
    lines = []
    peers = peers_of(results)
    main = PEER_NAMES[peers[0]] if peers else "distribution"
    sides = ["ours"] + peers
    names = ["ours"] + [PEER_NAMES[p] for p in peers]
    cells = sorted(
        {(r["op"], r["size"], r["conc"], r.get("mode", "")) for r in rows(results, section)},
        key=lambda c: (c[0] != "push", c[3], c[1], c[2]),
    )
    # Columns of the runs' other processes, when the results have them (since issue 38's
    # fourth pass): the load client's CPU, SeaweedFS's, and the cores the three kept busy.
    runs = [f"with {n}" for n in names]
    section_rows = rows(results, section)
    has_client = any(r.get("client_cpu_s") is not None for r in section_rows)
    has_store = any(r.get("store_cpu_s") is not None for r in section_rows)
    for op in ("push", "pull"):
        lines.append(f"**{op.capitalize()}**" + (" (blobs pushed monolithically just before)" if op == "pull" else ""))
        lines.append("")
        extra = [f"ratio (ours / {PEER_NAMES[p]})" for p in peers[1:]]
        lines.append(
            f"| ratio (ours / {main}, median MiB/s) | " + "".join(e + " | " for e in extra)
            + "blob | clients | mode | total | "
            + " | ".join(f"{n} MiB/s (min / median / max)" for n in names)
            + " | server CPU s per GiB (" + " / ".join(names) + ")"
            + (" | load client CPU s per GiB (" + " / ".join(runs) + ")" if has_client else "")
            + (" | SeaweedFS CPU s per GiB (" + " / ".join(runs) + ")" if has_store else "")
            + (" | cores busy (" + " / ".join(runs) + ")" if has_client else "")
            + " | peak RSS (" + " / ".join(names) + ") |"
        )
        lines.append("|" + "---|" * (7 + len(extra) + len(names) + 2 * has_client + has_store))
        for cop, size, conc, mode in cells:
            if cop != op:
                continue
            m = dict(op=op, size=size, conc=conc)
            if mode:
                m["mode"] = mode
            by = {side: rows(results, section, server=side, **m) for side in sides}
            ours = by["ours"]
            total = ours[0]["bytes"] >> 20 if ours else 0
            ratios = [
                ratio_cell([r["mib_s"] for r in ours], [r["mib_s"] for r in by[p]], goal)
                for p in peers
            ] or ["–"]
            lines.append(
                "| " + " | ".join(ratios)
                + f" | {size_label(size)} | {conc} | {mode or '–'} | {total} MiB | "
                + " | ".join(mmm([r["mib_s"] for r in by[x]]) for x in sides)
                + " | " + " / ".join(cpu_per_gib(by[x]) for x in sides)
                + (" | " + " / ".join(per_gib(by[x], "client_cpu_s") for x in sides) if has_client else "")
                + (" | " + " / ".join(per_gib(by[x], "store_cpu_s") for x in sides) if has_store else "")
                + (" | " + " / ".join(cores_busy(by[x]) for x in sides) if has_client else "")
                + " | " + " / ".join(mib([r["rss_kib"] for r in by[x]]) for x in sides) + " |"
            )
        lines.append("")
    return lines


def plot_blobs(results, section, path, title, quick):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, op in zip(axes, ("push", "pull")):
        for server, color in (("ours", "tab:red"), ("dist", "tab:blue"), ("dist28", "tab:gray")):
            for conc, style in ((1, "-"), (4, "--")):
                modes = ["mono", "chunked"] if op == "push" else [None]
                for mode in modes:
                    m = dict(server=server, op=op, conc=conc)
                    if mode:
                        m["mode"] = mode
                    pts = rows(results, section, **m)
                    sizes = sorted({r["size"] for r in pts})
                    if not sizes:
                        continue
                    ys = [med([r["mib_s"] for r in pts if r["size"] == s]) for s in sizes]
                    label = f"{PEER_NAMES.get(server, 'ours')} ×{conc}" + (f" {mode}" if mode else "")
                    marker = "o" if mode != "chunked" else "x"
                    ax.plot([s >> 20 for s in sizes], ys, style, color=color, marker=marker,
                            alpha=1.0 if mode != "chunked" else 0.6, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("blob size (MiB)")
        ax.set_ylabel("MiB/s (median of runs)")
        ax.set_title(f"{title}: {op}")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.text(0.01, 0.01, "Reproduce: bench/run.sh" + (" --quick" if quick else ""), fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_small(results, path, quick):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = ["head", "get", "tags"]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    sides = [("ours", "tab:red")] + [(p, c) for p, c in (("dist", "tab:blue"), ("dist28", "tab:gray")) if p in peers_of(results)]
    w = 0.8 / len(sides)
    for i, (server, color) in enumerate(sides):
        ys = [med([r["rps"] for r in rows(results, "fs-small", server=server, kind=k)]) for k in kinds]
        ax.bar([x + i * w for x in range(len(kinds))], ys, w, color=color, label=PEER_NAMES.get(server, "ours"))
    ax.set_xticks([x + w * (len(sides) - 1) / 2 for x in range(len(kinds))], ["manifest HEAD", "manifest GET", "tag list"])
    ax.set_ylabel("requests/s at 64 connections (median)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, "Reproduce: bench/run.sh" + (" --quick" if quick else ""), fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)


FLEET_SIDES = (("ours", "ours (`sendfile`)"), ("ours-copy", "ours (mapped copy)"), ("dist", "distribution v3"))


def fleet_table(fleet):
    """The fleet cell (bench/fleet.sh): N clients pulling one blob or image at once."""
    mib_each = fleet[0]["mib"]
    L = [f"**Fleet: N clients pull one {mib_each} MiB blob at once (`curl`), or a one-layer image "
         "(`crane pull`)** (goal ≥2× distribution v3 aggregate, server CPU ≤0.15 s/GiB; "
         "`bench/fleet.sh`, page cache warm)", ""]
    L.append("| clients | " + " | ".join(f"{n} MiB/s (min / median / max)" for _, n in FLEET_SIDES)
             + " | ratio (ours / v3, median) | ratio (copy / v3) | server CPU s per GiB ("
             + " / ".join(n for _, n in FLEET_SIDES) + ") |")
    L.append("|" + "---|" * (1 + len(FLEET_SIDES) + 3))
    cells = sorted({(r["kind"], r["clients"]) for r in fleet}, key=lambda c: (c[0] != "curl", c[1]))
    for kind, n in cells:
        by = {s: [r for r in fleet if r["side"] == s and r["kind"] == kind and r["clients"] == n]
              for s, _ in FLEET_SIDES}
        rate = {s: [n * r["mib"] / r["secs"] for r in rs] for s, rs in by.items()}
        gib = n * mib_each / 1024
        cpu = " / ".join(f"{med([r['cpu'] / gib for r in rs]):.3f}" if rs else "–" for rs in by.values())
        L.append(f"| {n} × `{kind}` | " + " | ".join(mmm(rate[s]) for s, _ in FLEET_SIDES)
                 + f" | {ratio_cell(rate['ours'], rate['dist'], 2.0)} | {ratio_cell(rate['ours-copy'], rate['dist'])}"
                 + f" | {cpu} |")
    L.append("")
    return L


def main():
    results_path, doc_path, plot_dir = sys.argv[1:4]
    results = load(results_path)
    machine = next(r for r in results if r.get("section") == "machine")
    end = next((r for r in results if r.get("section") == "machine-end"), {})
    quick = bool(machine.get("quick"))
    flag = " --quick" if quick else ""
    if "peers" not in machine:
        PEER_NAMES["dist"] = "distribution 2.8"
    peers = peers_of(results)
    sides = ["ours"] + peers
    names = ["ours"] + [PEER_NAMES[p] for p in peers]
    main_peer = names[1] if peers else "distribution"
    versions = machine["distribution"] + (f"; {machine['distribution28']}" if "dist28" in peers else "")
    os.makedirs(plot_dir, exist_ok=True)
    rel = os.path.relpath(plot_dir, os.path.dirname(doc_path) or ".")

    L = [BEGIN, "", "## Side by side with the peers (`bench/run.sh`)", ""]
    L.append(
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['mem_gib']} GiB, Linux "
        f"{machine['kernel']}; {machine['rustc']}; {versions}; SeaweedFS "
        f"{machine['weed']}; {machine['openssl']}. Run {machine['date']} to {end.get('date', '?')}"
        f"{' (`--quick`)' if quick else ' (full)'}, {machine['runs']} runs per cell, interleaved "
        f"(the side that goes first rotates). Load average (1/5/15 min) {machine['load_start']} at "
        f"the start and {end.get('load_end', '?')} at the end: the machine is shared with other "
        "builds, so absolute numbers are noisy and lower than on an idle machine; both sides ran "
        "under the same load, which is why only ratios of medians are compared."
    )
    L.append("")
    L.append(
        "The load client is `rd-bench` (`bench/src/main.rs`, two tokio worker threads, reqwest), the "
        "same binary against every server; blob contents are incompressible and unique per run; "
        "digests are computed before the clock starts; pulls count bytes and check lengths. Each "
        "blob run starts each server on an empty store. Distribution runs without its blob "
        "descriptor cache (our registry has none) and with redirects off. Peak RSS is the "
        "server's `VmHWM`, reset before each operation (`/proc/PID/clear_refs`), largest over "
        "the runs. Server CPU is the server process's user + system time during the operation "
        "(`/proc/PID/stat`), per GiB moved: the cost that scales, whoever's client limits the "
        "wall time. Beside it, where recorded: the load client's own CPU per GiB in the same "
        "run (`clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`), SeaweedFS's (its one `weed server` "
        "process) in the S3 cells, and the cores the three kept busy (their CPU seconds per wall "
        "second; the machine has "
        f"{machine.get('cores', '?')}): a cell near that is bound by CPU, and the columns say whose. Ratio = ours / {main_peer} (the main peer; distribution 2.8 in its own "
        "column), higher is better for us."
    )
    L.append("")

    fs_rows = rows(results, "fs")
    small = rows(results, "fs-small")
    if fs_rows or small:
        L += [f"### Registry, filesystem store vs {' and '.join(names[1:]) or 'distribution'} (filesystem driver)", ""]
    # A run narrowed with BENCH_ONLY leaves out what it did not measure (no empty tables, and
    # the plots of the sections it skipped stay as they were).
    if fs_rows:
        L += blob_tables(results, "fs", 1.5)
        plot_blobs(results, "fs", os.path.join(plot_dir, "registry-fs.png"), "filesystem store", quick)
        L += [f"![registry fs throughput]({rel}/registry-fs.png)", "",
              f"Figure: fs push and pull throughput against blob size, 1 and 4 clients. {REPRO.format(flag)}", ""]

    clients = rows(results, "clients")
    if clients:
        L += ["**Real clients: `skopeo copy` and `crane push` of a 512 MiB image** (two 256 MiB "
              "layers from an OCI layout; each client streams every blob in one chunked PATCH)", ""]
        L.append("| " + " | ".join(f"ratio (ours / {n}, median time)" for n in names[1:]) + " | client | image | "
                 + " | ".join(f"{n} s (min / median / max)" for n in names)
                 + " | server CPU s per GiB (" + " / ".join(names) + ") | peak RSS (" + " / ".join(names) + ") |")
        L.append("|" + "---|" * (2 + 2 * len(names) + len(peers) + 1))
        for client in ("skopeo", "crane"):
            by = {x: rows(results, "clients", server=x, client=client) for x in sides}
            o = by["ours"]
            if not o:
                continue
            # Ratio of speeds (peer time / our time): higher is better for us, as above.
            L.append(
                "| " + " | ".join(ratio_cell([1 / r["secs"] for r in o], [1 / r["secs"] for r in by[p]], 1.5) for p in peers)
                + f" | {client} | {o[0]['bytes'] >> 20} MiB | "
                + " | ".join(mmm([r["secs"] for r in by[x]], "{:.2f}") for x in sides)
                + " | " + " / ".join(cpu_per_gib(by[x]) for x in sides)
                + " | " + " / ".join(mib([r["rss_kib"] for r in by[x]]) for x in sides) + " |"
            )
        L.append("")

    if small:
        L += ["**Small requests at 64 connections** (goal ≥3×)", ""]
        L.append("| " + " | ".join(f"ratio (ours / {n}, median req/s)" for n in names[1:]) + " | request | "
                 + " | ".join(f"{n} req/s (min / median / max)" for n in names)
                 + " | p50 / p99 ms (" + " / ".join(names) + ") | peak RSS (" + " / ".join(names) + ") |")
        L.append("|" + "---|" * (len(peers) + 1 + len(names) + 2))
        kinds = {"head": "manifest HEAD", "get": "manifest GET", "tags": "tag list (100 tags)"}
        for kind in ("head", "get", "tags"):
            by = {x: rows(results, "fs-small", server=x, kind=kind) for x in sides}
            o = by["ours"]
            L.append(
                "| " + " | ".join(ratio_cell([r["rps"] for r in o], [r["rps"] for r in by[p]], 3.0) for p in peers)
                + f" | {kinds[kind]} | "
                + " | ".join(mmm([r["rps"] for r in by[x]]) for x in sides)
                + " | " + " / ".join(f"{med([r['p50_ms'] for r in by[x]]):.1f} / {med([r['p99_ms'] for r in by[x]]):.1f}" for x in sides)
                + " | " + " / ".join(mib([r["rss_kib"] for r in by[x]]) for x in sides) + " |"
            )
        L.append("")
        L.append("p50/p99 are the medians over the runs of each run's percentiles.")
        L.append("")
        plot_small(results, os.path.join(plot_dir, "registry-small.png"), quick)
        L += [f"![small requests]({rel}/registry-small.png)", "",
              f"Figure: requests/s at 64 connections. {REPRO.format(flag)}", ""]

    fleet = rows(results, "fleet")
    if fleet:
        L += fleet_table(fleet)

    if rows(results, "s3"):
        L += ["### Registry on SeaweedFS vs distribution's s3 driver on the same SeaweedFS", ""]
        L.append("Each run uses a fresh bucket on one `weed server -s3` (flags as `s3-fixtures`), "
                 "dropped after the run; monolithic pushes.")
        L.append("")
        L += blob_tables(results, "s3", 1.5)
        plot_blobs(results, "s3", os.path.join(plot_dir, "registry-s3.png"), "SeaweedFS S3", quick)
        L += [f"![registry s3 throughput]({rel}/registry-s3.png)", "",
              f"Figure: S3 push and pull throughput against blob size. {REPRO.format(flag)}", ""]
    counts = rows(results, "s3-count")
    if counts:
        L += ["**S3 requests per registry operation** (counted per S3 operation at the `s3-fixtures` "
              "proxy; fewer is better; chunked pushes use 8 MiB chunks)", ""]
        L.append("| operation | " + " | ".join(f"{n} total" for n in names) + " | "
                 + " | ".join(f"{n} by S3 operation" for n in names) + " |")
        L.append("|" + "---|" * (1 + 2 * len(names)))
        labels = []
        for r in counts:
            if r["op"] not in labels:
                labels.append(r["op"])

        def per(r):
            n = r["ops"] or 1
            return r["total"] / n, ", ".join(f"{k} {v / n:.1f}".replace(".0", "") for k, v in sorted(r["counts"].items()))

        for label in labels:
            cells = []
            for x in sides:
                r = next((r for r in counts if r["op"] == label and r["server"] == x), None)
                cells.append(per(r) if r else (float("nan"), "–"))
            L.append(f"| {label} | " + " | ".join(f"{t:.1f}" for t, _ in cells) + " | "
                     + " | ".join(b for _, b in cells) + " |")
        L.append("")

    hashes = rows(results, "hash")
    if hashes:
        # The goal is judged per CPU second: `openssl speed` divides by CPU user time unless
        # told `-elapsed`, and on a shared machine wall-clock rates measure the scheduler.
        o = [r["mb_s"] for r in hashes if r["server"] == "ours"]
        s = [r["mb_s"] for r in hashes if r["server"] == "openssl"]
        ow = [r["mb_s_wall"] for r in hashes if r["server"] == "ours" and "mb_s_wall" in r]
        sw = [r["mb_s_wall"] for r in hashes if r["server"] == "openssl" and "mb_s_wall" in r]
        pct = med(o) / med(s) * 100
        pct_wall = f"{med(ow) / med(sw) * 100:.0f}%" if ow and sw else "–"
        L += ["### Hashing: `validator::Digester` vs `openssl speed -evp sha256`", ""]
        L.append("| % of the limit (median, per CPU second) | Digester MB/s per CPU second (min / median / max) | openssl MB/s per CPU second, 256 KiB blocks (min / median / max) | % wall-clock | Digester MB/s wall-clock | openssl `-elapsed` MB/s wall-clock |")
        L.append("|---|---|---|---|---|---|")
        L.append(f"| {pct:.0f}%{' (below 80% goal)' if pct < 80 else ''} | {mmm(o)} | {mmm(s)} | {pct_wall} | {mmm(ow)} | {mmm(sw)} |")
        L.append("")
        L.append("Both sides are single-threaded; the CPU-time rates do not depend on how much of a core the scheduler gave each run, the wall-clock ones do.")
        L.append("")

    for part in ("builder", "worker"):
        if any(r.get("section") == "missing" and r.get("part") == part for r in results):
            L += [f"### {part.capitalize()}", "", f"`bench/{part}.sh` was not present when this run was made; no rows.", ""]
        else:
            md = os.path.join(os.path.dirname(results_path), "..", f"{part}.md")
            if os.path.exists(md):
                L += [f"### {part.capitalize()} (`bench/{part}.sh`)", ""]
                with open(md) as f:
                    L += [f.read().rstrip(), ""]
    L.append(END)
    block = "\n".join(L) + "\n"

    with open(doc_path) as f:
        doc = f.read()
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        doc = head + block + "\n" + tail
    else:
        # After the title and the first paragraph.
        parts = doc.split("\n\n", 2)
        doc = "\n\n".join(parts[:2]) + "\n\n" + block + "\n" + (parts[2] if len(parts) > 2 else "")
    with open(doc_path, "w") as f:
        f.write(doc)


if __name__ == "__main__":
    main()
