"""Synthesis: one fixed model answers every question from its restored context (temperature 0).

The context is cut to fit the model's window when it must be, and the cut is recorded per
question (characters offered vs used), never silent. An empty context (the `base` system) uses
the no-context template, which is the paper's floor and contamination probe.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from srb.atomic import write_json, write_jsonl
from srb.data.canonical import iter_jsonl, load_canonical
from srb.data.schema import Corpus, Question
from srb.llm.backends import ChatRequest
from srb.llm.client import LLMClient

log = logging.getLogger(__name__)

CHARS_PER_TOKEN_FALLBACK = 4.0  # only where no tokenizer is at hand (a hosted model)


def template_hash(*paths: str | Path) -> str:
    digest = hashlib.sha256()
    for p in paths:
        digest.update(Path(p).read_bytes())
    return digest.hexdigest()[:16]


class ContextFitter:
    """Cuts a context to the tokens left in the window after the prompt and the answer.

    `overhead` is kept free for what the server adds around the prompt: the chat template's
    role markers (30 tokens for SmolLM2's) and merges at the context's edges (1-2 tokens).
    64 leaves room for wordier chat templates; measured on 387 real SmolLM2 prompts, 32 left
    a single token spare on most of them.
    """

    OVERHEAD_TOKENS = 64

    def __init__(self, model_dir: str | None, max_model_len: int, max_answer_tokens: int):
        self.max_model_len = max_model_len
        self.max_answer_tokens = max_answer_tokens
        self.model_dir = model_dir
        self._tokenizer: Any = None
        self.has_tokenizer = (
            bool(model_dir) and (Path(model_dir) / "tokenizer_config.json").is_file()
        )

    @property
    def tokenizer(self) -> Any:
        """Loaded on first use: a job whose contexts all fit by character count never pays for
        importing transformers (most of a warm rerun's time per job)."""
        if self._tokenizer is None and self.has_tokenizer:
            fast = Path(self.model_dir) / "tokenizer.json"
            if fast.is_file():  # the `tokenizers` runtime alone: same ids, no transformers import
                from tokenizers import Tokenizer

                self._tokenizer = Tokenizer.from_file(str(fast))
            else:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        return self._tokenizer

    def _encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        tok = self.tokenizer
        if hasattr(tok, "encode_batch"):  # tokenizers.Tokenizer
            enc = tok.encode(text, add_special_tokens=False)
            return enc.ids, enc.offsets
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        return enc["input_ids"], enc["offset_mapping"]

    def count(self, text: str) -> int:
        if self.tokenizer is None:
            return int(len(text) / CHARS_PER_TOKEN_FALLBACK) + 1
        return len(self._encode(text)[0])

    def fit(
        self, template: str, question: str, context: str, overhead: int = OVERHEAD_TOKENS
    ) -> tuple[str, bool]:
        skeleton = template.format(question=question, context="")
        budget = self.max_model_len - self.max_answer_tokens - overhead
        if self.has_tokenizer and len((skeleton + context).encode("utf-8")) <= budget:
            return context, False  # a (byte-level) token spans at least one byte: it fits
        room = budget - self.count(skeleton)
        if room <= 0:
            raise ValueError(
                f"the prompt alone does not fit a {self.max_model_len}-token window with "
                f"{self.max_answer_tokens} answer tokens"
            )
        if self.count(context) <= room:
            return context, False
        if self.tokenizer is None:
            return context[: int((room - 1) * CHARS_PER_TOKEN_FALLBACK)], True  # count() <= room
        cut = self._encode(context)[1][room - 1][1]
        return context[:cut], True


def select_questions(corpus: Corpus, limit: int | None) -> list[Question]:
    """The first `limit` questions in file order: the same subset for every cell and judge."""
    questions = list(corpus.questions)
    return questions if limit is None else questions[:limit]


def synthesis_requests(
    cell_file: str | Path,
    corpus_dir: str | Path,
    templates: dict[str, str | Path],
    fitter: ContextFitter,
    max_tokens: int,
    limit: int | None,
    cell_questions: bool = False,
) -> tuple[list[ChatRequest], list[tuple[str, int, int, bool]]]:
    """The synthesizer's requests for one cell (what the workflow sends, and what the LLM-layer
    benchmark replays), with (question id, context chars, chars used, truncated) for each.

    `cell_questions`: answer exactly the cell's questions (a store system's cells hold the
    memory slice's questions, sized by `memory.papers`) instead of the first `limit`."""
    corpus = load_canonical(corpus_dir)
    if cell_questions:
        in_cell = {r["question_id"] for _, r in iter_jsonl(Path(cell_file))}
        wanted = {q.id: q for q in corpus.questions if q.id in in_cell}
    else:
        wanted = {q.id: q for q in select_questions(corpus, limit)}
    cells = {
        r["question_id"]: r for _, r in iter_jsonl(Path(cell_file)) if r["question_id"] in wanted
    }
    missing = [q for q in wanted if q not in cells]
    if missing:
        raise ValueError(f"{cell_file} has no context for questions {missing[:5]}")
    tmpl_text = {k: Path(v).read_text(encoding="utf-8") for k, v in templates.items()}
    requests, meta = [], []
    for qid, q in wanted.items():
        context = cells[qid]["context"]
        kind = "context" if context else "base"
        used, truncated = (
            fitter.fit(tmpl_text[kind], q.question, context) if context else ("", False)
        )
        prompt = tmpl_text[kind].format(question=q.question, context=used)
        requests.append(ChatRequest([{"role": "user", "content": prompt}], max_tokens=max_tokens))
        meta.append((qid, len(context), len(used), truncated))
    return requests, meta


def synthesize_cell(
    cell_file: str | Path,
    corpus_dir: str | Path,
    client: LLMClient,
    templates: dict[str, str | Path],
    fitter: ContextFitter,
    max_tokens: int,
    limit: int | None,
    out: str | Path,
    stats_out: str | Path | None = None,
    cell_questions: bool = False,
) -> None:
    requests, meta = synthesis_requests(
        cell_file, corpus_dir, templates, fitter, max_tokens, limit, cell_questions
    )
    t_hash = template_hash(*templates.values())
    completions = client.run(requests, t_hash, desc=f"synthesize {Path(cell_file).stem}")
    write_jsonl(
        out,
        (
            {
                "question_id": qid,
                "answer": c["text"],
                "finish_reason": c["finish_reason"],
                "prompt_tokens": c["prompt_tokens"],
                "completion_tokens": c["completion_tokens"],
                "latency_s": c["latency_s"],
                "context_chars": n_ctx,
                "context_chars_used": n_used,
                "context_truncated": truncated,
                "model": client.model_name,
            }
            for (qid, n_ctx, n_used, truncated), c in zip(meta, completions, strict=True)
        ),
    )
    if stats_out:
        write_json(stats_out, vars(client.stats))


def llm_only_cell(
    system: str, corpus_dir: str | Path, budget_chars: int | None, seed: int, out: str | Path
) -> None:
    """Contexts for systems that need no retrieval: `base` (none) and `direct_read` (the
    question's gold-source papers, then seeded random filler papers, up to the budget)."""
    corpus = load_canonical(corpus_dir)
    papers = corpus.paper_index()
    records = []
    for q in corpus.questions:
        spans: list[list[Any]] = []
        if system == "direct_read":
            if budget_chars is None:
                raise ValueError("direct_read needs a character budget")
            rng = random.Random(f"{seed}:{q.id}")
            filler = [p for p in sorted(papers) if p not in q.paper_ids]
            rng.shuffle(filler)
            used = 0
            for pid in [*q.paper_ids, *filler]:
                if used >= budget_chars:
                    break
                take = min(len(papers[pid].text), budget_chars - used)
                spans.append([pid, 0, take])
                used += take
        elif system != "base":
            raise ValueError(f"{system!r} is not an LLM-only system (base, direct_read)")
        texts = [papers[p].text[s:e] for p, s, e in spans]
        records.append(
            {
                "question_id": q.id,
                "unit_ids": [p for p, _, _ in spans],
                "scores": [],
                "spans": spans,
                "requested_chars": budget_chars,
                "achieved_chars": sum(len(t) for t in texts),
                "top_k": None,
                "truncated": bool(spans) and spans[-1][2] < len(papers[spans[-1][0]].text),
                "context": "\n\n".join(texts),
            }
        )
    write_jsonl(out, records)


def answers_by_question(path: str | Path) -> dict[str, dict[str, Any]]:
    return {r["question_id"]: r for _, r in iter_jsonl(Path(path))}


__all__: Sequence[str] = ["synthesize_cell", "llm_only_cell", "ContextFitter", "template_hash"]
