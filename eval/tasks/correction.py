"""VISCO's correction (`eval/correction.py`): a corrector revises each answer after a critique."""

from __future__ import annotations

from stepcritic.eval import correction as C
from stepcritic.eval import metrics as M
from stepcritic.eval import plots, tables
from stepcritic.eval.tasks.base import Metric, Task, register

NO_CORRECTOR = "the judge has no corrector (give --corrector, or use a generative judge)"
_CORRECTION_CRITIQUES = {"gold": ("gold critique", "the data's critique (VISCO's human critique)"),
                         "own": ("own critique", "the judge's own critique")}
METRICS = [
    m for setting, (short, what) in _CORRECTION_CRITIQUES.items() for m in (
        Metric(f"correction_{setting}_pcr", "correction", f"{setting}.pcr", f"PCR ({short})", True,
               "over chains whose answer was wrong",
               f"share of wrong answers the corrector makes right after {what}, VISCO's PCR (Sec. 3.1.2)",
               M.correction_gain, "chain",
               f"{NO_CORRECTOR}{'' if setting == 'gold' else ', the judge gives no critique'}, or no answer was wrong",
               table="correction"),
        Metric(f"correction_{setting}_ncr", "correction", f"{setting}.ncr", f"NCR ({short})", False,
               "over chains whose answer was right",
               f"share of right answers the corrector makes wrong after {what}, VISCO's NCR (Sec. 3.1.2)",
               M.correction_gain, "chain",
               f"{NO_CORRECTOR}{'' if setting == 'gold' else ', the judge gives no critique'}, or no answer was right",
               table="correction"),
        Metric(f"correction_{setting}_gain", "correction", f"{setting}.gain", f"Gain ({short})", True,
               "PCR - NCR", f"VISCO's correction gain after {what} (Sec. 3.1.2)", M.correction_gain, "chain",
               "PCR or NCR is undefined", table="correction", headline=setting == "own"),
    )
]


def section(d) -> dict:
    return C.section(d.gold, d.corrections)


def own_gain(data, boot):
    """The bootstrap statistic of VISCO's PCR - NCR after the judge's own critiques (`intervals`)."""
    return C.own_gain(data.gold, data.corrections, boot)


def render(metrics: dict, overall: dict) -> list[str]:
    """The rates of each judge's corrections, then who corrected each judge and what its requests gave."""
    tasks = metrics["tasks"]
    info = metrics.get("correction") or {}
    notes = []
    for name in overall:
        corrector = (info.get("correctors") or {}).get(name)
        requests = (info.get("requests") or {}).get(name)
        sec = overall[name]["correction"]
        if corrector is None:
            notes.append(f"- `{name}`: no corrector")
            continue
        failed = sec["gold"]["n_failed"] + sec["own"]["n_failed"]
        no_answer = sec["gold"]["n_no_answer"] + sec["own"]["n_no_answer"]
        notes.append(f"- `{name}`: corrected by `{corrector}` ({requests['asked']} requests asked and "
                     f"{requests['cached']} answered from the cache by that corrector in this run, for all the judges "
                     f"it corrects); {sec['n_chains']} chains with a reference answer; {no_answer} replies without a "
                     f"readable answer (counted wrong), {failed} failed requests (left out, asked again on a rerun)")
    return ["## Correction", "",
            "VISCO's correction (Sec. 3.1.2): a corrector is shown each chain with a critique and asked for the "
            "answer. PCR: share of wrong answers made right; NCR: share of right answers made wrong (lower is "
            "better); gain = PCR - NCR. With the gold critique (the data's step labels, first reference "
            "explanation and answer label) and with the judge's own critique. `corrections.jsonl` holds every "
            "corrected answer; `plots/correction.png` the rates.", "",
            tables.leaderboard(overall, tasks, metrics["matcher"], tables.columns(tasks, "correction")), "", *notes,
            ""]


def ask_after(config, gold: list[dict], runs: dict, chain_at):
    """Each judge's corrector asked for the answer after the gold critique and after the judge's own (`correction.run`,
    shown the chains' images): the corrections by judge, and who corrected whom with what requests."""
    corrector = config.corrector
    corrections = C.run(gold, runs, {j.name: j for j in config.judges}, corrector, chain_at, config.out_dir,
                        config.progress)
    block = {"corrector": None if corrector is None else corrector.name,
             "correctors": {name: c and c["corrector"] for name, c in corrections.items()},
             "requests": {name: c and c["requests"] for name, c in corrections.items()}}
    return {name: {"corrections": c} for name, c in corrections.items()}, block


def correction(metrics: dict, path: str) -> bool:
    """VISCO's PCR and NCR (x100) per judge, after the gold critique and after its own; "–" where undefined."""
    sections = {name: r["overall"]["correction"] for name, r in metrics["judges"].items()
                if "correction" in r["overall"]}
    if not sections:
        return False
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.8 * len(sections)), 3.6))
    bars = [(setting, rate) for setting in ("gold", "own") for rate in ("pcr", "ncr")]
    width = 0.8 / len(bars)
    for k, (setting, rate) in enumerate(bars):
        xs = [i + (k - (len(bars) - 1) / 2) * width for i in range(len(sections))]
        plots.bars(ax, xs, [None if sec[setting][rate] is None else 100 * sec[setting][rate]
                            for sec in sections.values()], width, f"{rate.upper()} ({setting} critique)")
    ax.set_xticks(range(len(sections)), list(sections), rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_ylabel("x100")
    ax.set_title("Correction (PCR: wrong made right; NCR: right made wrong)")
    ax.legend(fontsize=7)
    plots.save(fig, path)
    return True


TASK = register(Task(
    "correction", "corrections", "a corrector revises each chain's answer given the gold critique and given the "
    "judge's own: PCR, NCR and correction gain (VISCO Sec. 3.1.2)",
    # opt-in: two corrector requests per chain and judge, and a corrector to name
    default=False, section=section, statistics={"correction_own_gain": own_gain}, render=render, place=90,
    ask_after=ask_after, images=True, options=("--corrector",), plots={"correction": correction},
    check=lambda config: C.check(config.judges, config.corrector),
), METRICS)
