"""The audit chart: entries per data segment per replica, with divergence and damage markers.

Drawn with matplotlib's Agg backend (no display needed) from the small aggregated rows of the
``AuditReport``; nothing here touches Spark. One group of bars per segment (by file name,
which is the segment's start offset in the log), one bar per replica. A red ``x`` above a bar
marks a segment holding divergent entries of that replica, an orange triangle one holding
corrupt entries. The title carries the verdict; the legend, each replica's last index and lag.
"""

from __future__ import annotations


def draw_audit_chart(report, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    replicas = [r.replica for r in report.replicas]
    seg_names = sorted({s["segment"] for s in report.segments})
    pos = {name: i for i, name in enumerate(seg_names)}
    counts = {(s["replica"], s["segment"]): s["entries"] for s in report.segments}
    diverged = {(c["replica"], c["segment"]) for d in report.divergent for c in d["copies"]}
    corrupt = {(c["replica"], c["segment"]) for c in report.corrupt}

    width = 0.8 / max(1, len(replicas))
    fig_w = min(24.0, max(8.0, 0.45 * len(seg_names) * max(1, len(replicas)) / 2 + 4))
    fig, ax = plt.subplots(figsize=(fig_w, 5.5), dpi=110)
    top = max(counts.values(), default=1)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, r in enumerate(report.replicas):
        xs = [pos[s] + (k - (len(replicas) - 1) / 2) * width for s in seg_names]
        ys = [counts.get((r.replica, s), 0) for s in seg_names]
        label = f"{r.replica}: last {r.last}, committed {r.committed}" + (
            f", {r.lag} behind" if r.lag else "")
        ax.bar(xs, ys, width=width, color=colors[k % len(colors)], label=label)
        for x, y, s in zip(xs, ys, seg_names):
            if (r.replica, s) in diverged:
                ax.plot(x, y + top * 0.04, marker="x", color="red", markersize=11,
                        markeredgewidth=2.5, linestyle="none")
            if (r.replica, s) in corrupt:
                ax.plot(x, y + top * 0.09, marker="^", color="darkorange", markersize=9,
                        linestyle="none")
    if diverged:
        ax.plot([], [], marker="x", color="red", linestyle="none", markeredgewidth=2.5,
                label=f"divergent entries ({report.divergent_count})")
    if corrupt:
        ax.plot([], [], marker="^", color="darkorange", linestyle="none",
                label=f"corrupt entries ({report.corrupt_count})")
    step = max(1, len(seg_names) // 20)
    ax.set_xticks(range(0, len(seg_names), step))
    ax.set_xticklabels([str(seg_names[i]) for i in range(0, len(seg_names), step)],
                       rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("data segment (start offset in the log)")
    ax.set_ylabel("entries in segment")
    ax.set_ylim(0, top * 1.2 + 1)
    ax.set_title(f"dledger replica audit: {report.verdict}\ncommon prefix up to "
                 f"{report.common_prefix_end}, committed index {report.committed_index}",
                 fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
