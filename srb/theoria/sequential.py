"""Beyond the paper: Theoria evaluated sequentially, through its own service.

Papers arrive in a seeded order, in batches, through POST /observe (on a fresh writable store
and a private service); after each batch the questions answerable so far (every source paper
seen) are asked through POST /retrieve + the fixed synthesizer, scored with the LLM-free rubric
judge and the gold direction label, and GET /theories is snapshotted. The same questions are
then asked of the bulk-ingested store (the grid's), so the last batch shows whether
incremental memory converges to bulk: answer quality, label accuracy, and the overlap of the
retrieved texts (Jaccard, LLM-free).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from srb.data.schema import Paper, Question
from srb.judge import composite, label_from_answer, rubric_scores
from srb.llm.backends import ChatRequest
from srb.llm.client import LLMClient
from srb.synthesize import ContextFitter

EVENTS = ("seeded", "supported", "contradicted", "promoted", "demoted")


@dataclass(frozen=True)
class Answerer:
    """The fixed synthesizer with its template, as the grid's synthesize jobs use them."""

    client: LLMClient
    template: str
    template_hash: str
    fitter: ContextFitter
    max_tokens: int

    def answer(self, questions: Sequence[Question], contexts: Sequence[str]) -> list[str]:
        requests = []
        for q, context in zip(questions, contexts, strict=True):
            used, _ = self.fitter.fit(self.template, q.question, context)
            prompt = self.template.format(question=q.question, context=used)
            requests.append(
                ChatRequest([{"role": "user", "content": prompt}], max_tokens=self.max_tokens)
            )
        done = self.client.run(requests, self.template_hash, desc="sequential answers")
        return [c["text"] for c in done]


def arrival_order(papers: Sequence[Paper], seed: int) -> list[Paper]:
    order = sorted(papers, key=lambda p: p.id)
    random.Random(seed).shuffle(order)
    return order


def _retrieve(http: httpx.Client, question: Question, k: int) -> list[dict[str, Any]]:
    response = http.post("/retrieve", json={"query": question.question, "k": k})
    response.raise_for_status()
    return list(response.json()["items"])


def _score(
    questions: Sequence[Question], found: Sequence[list[dict[str, Any]]], answers: Sequence[str]
) -> tuple[float | None, float | None, list[dict[str, Any]]]:
    rows = []
    for q, items, answer in zip(questions, found, answers, strict=True):
        cell = {
            "context": "\n\n".join(i["text"] for i in items),
            "spans": [[p, None, None] for i in items for p in i["paper_ids"]],
        }
        stated = label_from_answer(answer)
        rows.append(
            {
                "question_id": q.id,
                "composite": composite(rubric_scores(q, answer, cell)),
                "label_correct": None if not q.gold_label else stated == q.gold_label,
                "items": [i["item_id"] for i in items],
                "texts": [i["text"] for i in items],
                "answer": answer,
            }
        )
    quality = round(statistics.fmean(r["composite"] for r in rows), 3) if rows else None
    labelled = [r["label_correct"] for r in rows if r["label_correct"] is not None]
    accuracy = round(sum(labelled) / len(labelled), 3) if labelled else None
    return quality, accuracy, rows


def jaccard(a: Sequence[str], b: Sequence[str]) -> float:
    sa, sb = set(a), set(b)
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def observe_sequentially(
    incremental_url: str,
    bulk_url: str,
    papers: Sequence[Paper],
    questions: Sequence[Question],
    k: int,
    batch_size: int,
    seed: int,
) -> dict[str, Any]:
    """The memory side, with the ingest model only: each batch observed, then what /retrieve
    finds for the questions answerable so far and the /theories counts; the bulk store's
    retrievals last. No answer is written here, so the synthesizer's server need not be up
    beside the ingest model's (`answer_sequentially` runs after it stops)."""
    order = arrival_order(papers, seed)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    observed: list[dict[str, Any]] = []
    seen: set[str] = set()
    with httpx.Client(base_url=incremental_url, timeout=3600) as http:
        for b, batch in enumerate(batches, 1):
            events = dict.fromkeys(EVENTS, 0)
            claims = 0
            for paper in batch:
                response = http.post(
                    "/observe", json={"paper_id": paper.id, "text": paper.text, "batch": b}
                )
                if response.status_code != 200:
                    raise RuntimeError(
                        f"/observe of paper {paper.id} (batch {b}) answered "
                        f"{response.status_code}: {response.text[:300]}"
                    )
                report = response.json()
                claims += report["claims"]
                for e in EVENTS:
                    events[e] += int(report["theory_events"].get(e, 0))
                seen.add(paper.id)
            asked = [q for q in questions if set(q.paper_ids) <= seen]
            observed.append(
                {
                    "batch": b,
                    "papers_seen": len(seen),
                    "claims_added": claims,
                    "events": events,
                    "theories": http.get("/theories").json()["counts"],
                    "asked": [q.id for q in asked],
                    "found": [_retrieve(http, q, k) for q in asked],
                }
            )
    with httpx.Client(base_url=bulk_url, timeout=3600) as http:
        asked = [q for q in questions if set(q.paper_ids) <= seen]
        bulk = {
            "papers_seen": len(seen),
            "theories": http.get("/theories").json()["counts"],
            "asked": [q.id for q in asked],
            "found": [_retrieve(http, q, k) for q in asked],
        }
    return {
        "order": [p.id for p in order],
        "batch_size": batch_size,
        "k": k,
        "seed": seed,
        "batches": observed,
        "bulk": bulk,
    }


def answer_sequentially(
    observed: dict[str, Any], questions: Sequence[Question], answerer: Answerer
) -> dict[str, Any]:
    """Every batch's row, the bulk row, and per-question details (see module), from what
    `observe_sequentially` recorded, answered by the fixed synthesizer."""
    by_id = {q.id: q for q in questions}

    def answered(stage: dict[str, Any]) -> tuple[float | None, float | None, list[dict]]:
        asked = [by_id[qid] for qid in stage["asked"]]
        found = stage["found"]
        answers = answerer.answer(asked, ["\n\n".join(i["text"] for i in f) for f in found])
        return _score(asked, found, answers)

    rows: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    last: dict[str, list[str]] = {}
    for stage in observed["batches"]:
        quality, accuracy, scored = answered(stage)
        last = {r["question_id"]: r["texts"] for r in scored}
        rows.append(
            {
                "stage": f"batch {stage['batch']}",
                "batch": stage["batch"],
                "papers_seen": stage["papers_seen"],
                "questions": len(stage["asked"]),
                "rubric_composite": quality,
                "label_accuracy": accuracy,
                "claims_added": stage["claims_added"],
                **{f"theories_{c}": stage["theories"][c] for c in ("low", "medium", "high")},
                **stage["events"],
                "jaccard_to_bulk": None,
            }
        )
        details += [{"batch": stage["batch"], **r} for r in scored]
    bulk = observed["bulk"]
    quality, accuracy, scored = answered(bulk)
    overlap = [jaccard(last.get(r["question_id"], []), r["texts"]) for r in scored]
    if rows and overlap:
        rows[-1]["jaccard_to_bulk"] = round(statistics.fmean(overlap), 3)
    rows.append(
        {
            "stage": "bulk",
            "batch": None,
            "papers_seen": bulk["papers_seen"],
            "questions": len(bulk["asked"]),
            "rubric_composite": quality,
            "label_accuracy": accuracy,
            "claims_added": None,
            **{f"theories_{c}": bulk["theories"][c] for c in ("low", "medium", "high")},
            **dict.fromkeys(EVENTS),
            "jaccard_to_bulk": 1.0,
        }
    )
    details += [{"batch": "bulk", **r} for r in scored]
    return {
        **{key: observed[key] for key in ("order", "batch_size", "k", "seed")},
        "rows": rows,
        "details": details,
    }


def sequential_figure(result: dict[str, Any], title: str, png_out: str | Path) -> None:
    """Answer quality vs papers seen (bulk as dashed lines), and theories by confidence."""
    from srb.figures import pyplot, save_png

    plt = pyplot()
    rows = [r for r in result["rows"] if r["stage"] != "bulk"]
    bulk = next(r for r in result["rows"] if r["stage"] == "bulk")
    x = [r["papers_seen"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for key, colour, label in (
        ("rubric_composite", "C0", "rubric composite (0-10)"),
        ("label_accuracy", "C1", "label accuracy x 10"),
    ):
        scale = 10 if key == "label_accuracy" else 1
        ys = [None if r[key] is None else r[key] * scale for r in rows]
        left.plot(x, [float("nan") if y is None else y for y in ys], "o-", color=colour,
                  label=f"{label}, incremental")  # fmt: skip
        if bulk[key] is not None:
            left.axhline(bulk[key] * scale, color=colour, ls="--", label=f"{label}, bulk")
    left.set_xlabel("papers observed")
    left.set_ylabel("score")
    left.set_ylim(0, 10)
    n = [r["questions"] for r in rows]
    left.set_title(f"answers to questions answerable so far (n = {n})", fontsize=9)
    left.legend(fontsize=7)
    bottom = [0] * len(rows)
    for conf, colour in (("low", "C7"), ("medium", "C2"), ("high", "C3")):
        vals = [r[f"theories_{conf}"] for r in rows]
        right.bar(x, vals, bottom=bottom, color=colour, label=conf)
        bottom = [a + b for a, b in zip(bottom, vals, strict=True)]
    right.set_xlabel("papers observed")
    right.set_ylabel("theories")
    right.set_title("theories by confidence after each batch", fontsize=9)
    right.legend(fontsize=7, title="confidence")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_png(fig, png_out)
