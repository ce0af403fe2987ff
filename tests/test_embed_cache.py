"""Encoder calls are cached like LLM calls: a rerun encodes nothing and replays exact bytes."""

from __future__ import annotations

import numpy as np

from srb.index.embed_cache import EmbeddingCache, encoder_fingerprint


def fake_encoder(calls: list[list[str]]):
    def encode(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.array([[len(t), t.count("a"), 0.5] for t in texts], dtype=np.float32) / 3.0

    return encode


def test_second_pass_encodes_nothing_and_is_byte_identical(tmp_path):
    calls: list[list[str]] = []
    texts = ["alpha", "beta", "gamma", "alpha"]
    first, n1 = EmbeddingCache(tmp_path / "e.sqlite").encode("fp", texts, fake_encoder(calls))
    second, n2 = EmbeddingCache(tmp_path / "e.sqlite").encode("fp", texts, fake_encoder(calls))
    assert (n1, n2) == (3, 0)  # the duplicate text is encoded once
    assert calls == [["alpha", "beta", "gamma"]] or sorted(calls[0]) == ["alpha", "beta", "gamma"]
    assert first.tobytes() == second.tobytes()
    assert first.shape == (4, 3) and first.dtype == np.float32
    np.testing.assert_array_equal(first[0], first[3])


def test_only_misses_are_encoded_and_fingerprint_separates_models(tmp_path):
    calls: list[list[str]] = []
    cache = EmbeddingCache(tmp_path / "e.sqlite")
    cache.encode("fp", ["a", "b"], fake_encoder(calls))
    _, n = cache.encode("fp", ["a", "b", "c"], fake_encoder(calls))
    assert n == 1 and calls[-1] == ["c"]
    _, n = cache.encode("other-model", ["a"], fake_encoder(calls))
    assert n == 1


def test_encoder_fingerprint_changes_with_weights(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights-1")
    (tmp_path / "config.json").write_text("{}")
    before = encoder_fingerprint(str(tmp_path))
    assert before == encoder_fingerprint(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"weights-2")
    assert encoder_fingerprint(str(tmp_path)) != before
