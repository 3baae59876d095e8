"""The audit chart: per replica, the index range held in each term, lag, divergence, damage.

Drawn with matplotlib's Agg backend (no display needed) from the small aggregated rows of the
``AuditReport`` (``ReplicaSummary.terms``, ``divergent``, ``corrupt``); nothing here touches
Spark. What an operator looks for, one horizontal lane per replica along the index axis:

- a bar per term, coloured by term (the same colour on every replica) and labelled with it,
  so a failover shows as a change of colour at the index where the new leader began;
- the lag: a hatched grey stretch from the replica's last index to the longest log's, with
  "N behind" written at the lane's end;
- divergent entries: a red band over the indexes where the replica's copy differs, with a
  red ``x`` at each listed range's start (markers keep a fixed size, so a short divergent
  tail stays visible on a long log);
- corrupt entries: an orange triangle at each listed damaged index;
- dashed lines at the common prefix's end and at the highest committed index.
"""

from __future__ import annotations


def _ranges(indexes: list[int]) -> list[tuple[int, int]]:
    """Sorted indexes as inclusive runs: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    out: list[tuple[int, int]] = []
    for i in sorted(set(indexes)):
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def divergent_ranges(report) -> dict[str, list[tuple[int, int]]]:
    """Per replica, the listed divergent indexes where its copy is not the majority's."""
    per: dict[str, list[int]] = {r.replica: [] for r in report.replicas}
    for d in report.divergent:
        copies = [c for c in d["copies"] if c.get("intact", True)]
        counts: dict[tuple, int] = {}
        for c in copies:
            key = (c["term"], c["pos"], c["size"], c["magic"], c["crc"])
            counts[key] = counts.get(key, 0) + 1
        top = max(counts.values(), default=0)
        majority = [k for k, v in counts.items() if v == top]
        for c in copies:
            key = (c["term"], c["pos"], c["size"], c["magic"], c["crc"])
            # with no strict majority every copy is marked
            if len(majority) != 1 or key != majority[0]:
                per.setdefault(c["replica"], []).append(d["index"])
    return {k: _ranges(v) for k, v in per.items()}


def draw_audit_chart(report, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reps = report.replicas
    lasts = [r.last for r in reps if r.last is not None]
    firsts = [r.first for r in reps if r.first is not None]
    lo = min(firsts, default=0)
    hi = max(lasts, default=0)
    span = max(1, hi - lo + 1)
    min_w = span * 0.004          # the narrowest band drawn, so single entries show
    all_terms = sorted({t["term"] for r in reps for t in r.terms})
    cmap = plt.get_cmap("tab10" if len(all_terms) <= 10 else "tab20")
    color = {t: cmap(i % cmap.N) for i, t in enumerate(all_terms)}
    div = divergent_ranges(report)

    fig, ax = plt.subplots(figsize=(11, 1.6 + 0.9 * len(reps)), dpi=110)
    for row, r in enumerate(reps):
        y = len(reps) - 1 - row
        for t in r.terms:
            w = max(min_w, t["last"] - t["first"] + 1)
            ax.broken_barh([(t["first"], w)], (y - 0.3, 0.6), facecolors=color[t["term"]],
                           edgecolor="white", linewidth=0.5)
            if w > span * 0.06:
                ax.text(t["first"] + w / 2, y, f"term {t['term']}", ha="center", va="center",
                        fontsize=8, color="white", fontweight="bold")
        last = r.last if r.last is not None else lo - 1
        if r.lag > 0:
            ax.broken_barh([(last + 1, max(min_w, hi - last))], (y - 0.3, 0.6),
                           facecolors="none", edgecolor="grey", hatch="///", linewidth=0.5)
        note = f"{r.lag} behind" if r.lag else "longest"
        if r.open_error:
            note += ", store refused to open"
        ax.text(hi + span * 0.02, y, note, va="center", fontsize=8)
        for a, b in div.get(r.replica, []):
            ax.broken_barh([(a, max(min_w, b - a + 1))], (y + 0.32, 0.12), facecolors="red")
            ax.plot(a, y + 0.38, marker="x", color="red", markersize=9, markeredgewidth=2)
        bad = [c["index"] for c in report.corrupt if c["replica"] == r.replica]
        if bad:
            ax.plot(bad, [y - 0.42] * len(bad), marker="^", color="darkorange", markersize=8,
                    linestyle="none")
    ax.axvline(report.common_prefix_end, color="black", linestyle="--", linewidth=1)
    if report.committed_index >= 0 and report.committed_index != report.common_prefix_end:
        ax.axvline(report.committed_index, color="green", linestyle=":", linewidth=1.2)

    # legend: terms, then the markers actually drawn
    handles = [plt.Rectangle((0, 0), 1, 1, color=color[t]) for t in all_terms]
    labels = [f"term {t}" for t in all_terms]
    handles.append(plt.Line2D([], [], color="black", linestyle="--"))
    labels.append(f"common prefix end ({report.common_prefix_end})")
    if report.committed_index >= 0 and report.committed_index != report.common_prefix_end:
        handles.append(plt.Line2D([], [], color="green", linestyle=":"))
        labels.append(f"committed index ({report.committed_index})")
    if any(r.lag for r in reps):
        handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="none", edgecolor="grey",
                                     hatch="///"))
        labels.append("missing: lag behind the longest log")
    if any(div.values()):
        handles.append(plt.Line2D([], [], color="red", marker="x", linestyle="none",
                                  markeredgewidth=2))
        labels.append(f"divergent entries ({report.divergent_count} from "
                      f"{report.divergent_first})")
    if report.corrupt:
        handles.append(plt.Line2D([], [], color="darkorange", marker="^", linestyle="none"))
        labels.append(f"corrupt entries ({report.corrupt_count})")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.08, 1.0), fontsize=8,
              frameon=False)

    ax.set_yticks(range(len(reps)))
    ax.set_yticklabels([f"{r.replica}\n{r.first}..{r.last}" for r in reversed(reps)],
                       fontsize=8)
    ax.set_ylim(-0.7, len(reps) - 0.3)
    ax.set_xlim(lo - span * 0.01, hi + span * 0.01 + 1)
    ax.set_xlabel("log index")
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    import textwrap

    ax.set_title("\n".join(textwrap.wrap(f"dledger replica audit: {report.verdict}", 110)),
                 fontsize=10, loc="left")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
