"""The packaged encoder's vectors do not depend on batch companions or thread count on a CPU.

Batched encoding pads a batch to its longest text, and the GEMM kernels' blocking follows the
batch's shape and the thread count: a question's vector moved by ~1e-7 with the job that
encoded it first, and dense scores with it (found by the store grid's kill sweep).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from srb.index.dense import Encoder, declared_dimension

TEXTS = [
    "Does aspirin reduce the risk of myocardial infarction in adults over fifty?",
    "Methods: 412 patients were randomised to metformin or placebo for 24 weeks. " * 6,
    "BMI",
    "The intervention group showed a lower HbA1c at follow-up (p < 0.01) than controls. " * 3,
    "Did the dose of 5 mg change the outcome compared with 10 mg?",
]


def test_a_texts_vector_is_the_same_alone_in_a_mixed_batch_and_on_any_thread_count() -> None:
    torch_threads = torch.get_num_threads()
    try:
        alone = [Encoder("minilm", threads=1, device="cpu").encode([t])[0] for t in TEXTS]
        together = Encoder("minilm", threads=2, device="cpu").encode(TEXTS, batch_size=32)
        reversed_ = Encoder("minilm", threads=3, device="cpu").encode(TEXTS[::-1])[::-1]
    finally:
        torch.set_num_threads(torch_threads)
    assert np.array_equal(np.stack(alone), together)
    assert np.array_equal(together, reversed_)
    assert together.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, rtol=1e-5)


def test_batched_encoding_on_request_gives_the_same_vectors_up_to_float_error() -> None:
    """The GPU path (batched) agrees with the per-text path to float error, not bit for bit."""
    torch_threads = torch.get_num_threads()
    try:
        per_text = Encoder("minilm", threads=2, device="cpu").encode(TEXTS)
        batched = Encoder("minilm", threads=2, device="cpu", per_text=False).encode(TEXTS)
    finally:
        torch.set_num_threads(torch_threads)
    np.testing.assert_allclose(per_text, batched, atol=1e-5)
    assert (per_text @ batched.T).argmax(axis=1).tolist() == list(range(len(TEXTS)))


def test_no_texts_give_an_empty_matrix() -> None:
    vectors = Encoder("minilm", threads=2, device="cpu").encode([])
    assert vectors.shape[0] == 0


def test_the_dimension_is_read_from_the_model_directory_without_loading_the_model() -> None:
    """A store job whose queries are all cached asks only for the dimension: it must not pay for
    loading torch and the encoder, and the declared dimension must be the loaded model's."""
    encoder = Encoder("minilm")
    declared = encoder.dim
    assert encoder._model is None
    assert declared == encoder.model.get_embedding_dimension()


def test_dense_layers_set_the_dimension_and_an_unknown_module_defers_to_the_model(
    tmp_path: Path,
) -> None:
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
    ]
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling/config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": 384,
                "pooling_mode_mean_tokens": True,
                "pooling_mode_max_tokens": True,
            }
        )
    )
    (tmp_path / "modules.json").write_text(json.dumps(modules[:2]))
    assert declared_dimension(tmp_path) == 768  # two pooling modes are concatenated
    (tmp_path / "2_Dense").mkdir()
    (tmp_path / "2_Dense/config.json").write_text(
        json.dumps({"in_features": 768, "out_features": 256})
    )
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    assert declared_dimension(tmp_path) == 256
    unknown = {**modules[2], "type": "my_lib.Projection"}
    (tmp_path / "modules.json").write_text(json.dumps([*modules[:2], unknown]))
    assert declared_dimension(tmp_path) is None
    assert declared_dimension(tmp_path / "missing") is None
