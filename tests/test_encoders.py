"""The default MiniLM encoder: bf16 autocast must not change what it embeds, only how fast."""

import numpy as np

from llama_index_vmem.encoders import default_text_embedding
from llama_index_vmem.encoders.huggingface import cpu_has_native_bf16
from llama_index_vmem.encoders.text import padded_batches, token_lengths
from llama_index_vmem.store import Collection

TEXTS = [
    "I adopted a grey cat named Miso last spring.",
    "The rocket launch was postponed because of high winds over the coast.",
    "We ordered a flat white and an almond croissant at the corner cafe, then walked to the river "
    "and watched the boats for an hour before the rain started.",
]


def test_bf16_autocast_embeds_like_fp32(minilm):
    fp32 = default_text_embedding(bf16=False)
    bf16 = default_text_embedding(bf16=True)
    a = np.asarray(fp32.get_text_embedding_batch(TEXTS))
    b = np.asarray(bf16.get_text_embedding_batch(TEXTS))
    cos = np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.999
    assert not np.array_equal(a, b)  # autocast really ran: bf16 products round differently
    # a query still finds its own text first, in either precision
    q = np.asarray(bf16.get_query_embedding("what is my cat called"))
    assert int(np.argmax(a @ q)) == 0


def test_auto_precision_follows_the_cpu():
    assert default_text_embedding().bf16 is cpu_has_native_bf16()
    # stores built in either precision hold the same model: the manifest names it the same way
    assert default_text_embedding(bf16=True).class_name() == default_text_embedding(bf16=False).class_name()


def test_padded_batches_sort_cover_and_respect_the_budget():
    lengths = [300, 5, 40, 40, 1200, 7, 90, 2500, 60, 15]
    batches = padded_batches(lengths, budget=400, max_size=3)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))  # every text exactly once
    assert [lengths[i] for i in flat] == sorted(lengths)  # shortest first
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 400
    assert [len(b) for b in batches] == [3, 3, 1, 1, 1, 1]  # short texts share, long ones go alone


def test_token_lengths_come_from_the_encoders_tokenizer_or_an_estimate(minilm):
    from llama_index.core.embeddings import MockEmbedding

    texts = ["hello", "the rocket launch was postponed", "word " * 400]
    counted = token_lengths(minilm, texts)
    assert counted[0] == 3 and counted[1] == 7  # [CLS] ... [SEP]
    assert counted[2] == minilm.max_length  # cut where the forward pass cuts
    assert token_lengths(minilm, []) == []
    assert token_lengths(MockEmbedding(embed_dim=4), texts) == [2, 8, 501]  # characters / 4, plus one


def test_ingest_embeds_in_padded_batches_and_stores_what_one_text_at_a_time_gives(make_index, minilm):
    index = make_index()
    calls = []
    original = type(minilm).get_text_embedding_batch

    def recording(self, texts, **kwargs):
        calls.append(len(texts))
        return original(self, texts, **kwargs)

    rounds = [{"round_key": f"D1:{i}", "user": "tiny" if i % 2 else "a much longer message " * 30, "assistant": "ok"}
              for i in range(1, 41)]
    try:
        type(minilm).get_text_embedding_batch = recording
        index.add_rounds(rounds)
    finally:
        type(minilm).get_text_embedding_batch = original
    assert sum(calls) == 80 and max(calls) <= 128 and len(calls) >= 2
    long_text = rounds[1]["user"].strip()
    hit = index.store.search(Collection.TEXT, "text_dense", minilm.get_text_embedding(long_text), index.scope(), 1)[0]
    assert hit.payload["text"] == long_text and hit.score > 0.999


def test_encoders_load_without_a_progress_bar_and_leave_the_switch_as_it_was(capfd, tiny_siglip):
    from transformers.utils import logging as hf_logging

    from llama_index_vmem.encoders import SiglipImageEncoder

    hf_logging.enable_progress_bar()
    default_text_embedding(bf16=False)
    SiglipImageEncoder(model_name=tiny_siglip.model_name, local_files_only=True).dimension  # loads the model
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()


def test_a_question_is_encoded_on_one_torch_thread_and_the_callers_count_comes_back(tmp_path, minilm, monkeypatch):
    """One question on every core waits on its own threads when other work holds the cores; the app's
    own torch setting must be what it was after, in this thread and in others."""
    import threading

    import torch

    from llama_index_vmem import VMemIndex
    from llama_index_vmem.encoders import threads

    torch.set_num_threads(2)
    seen = []
    original = type(minilm).get_query_embedding
    monkeypatch.setattr(type(minilm), "get_query_embedding",
                        lambda self, q: (seen.append(torch.get_num_threads()), original(self, q))[1])
    other = {}
    with VMemIndex.from_defaults(path=tmp_path / "m", embed_model=minilm) as index:
        index.add_rounds([{"user": "My cat is called Miso.", "assistant": "Cute!"}])
        index.as_retriever(k=1).retrieve("what is my cat called")
        worker = threading.Thread(target=lambda: other.setdefault("n", torch.get_num_threads()))
        worker.start()
        worker.join()
        assert seen == [1] and torch.get_num_threads() == 2 and other["n"] == 2
        monkeypatch.setattr(threads, "QUERY_THREADS", None)
        index.clear_query_cache()
        index.as_retriever(k=1).retrieve("what is my cat called")
        assert seen == [1, 2] and torch.get_num_threads() == 2


def test_importing_the_index_leaves_torch_and_the_server_client_for_later():
    """An app that imports the library pays for torch when it makes an encoder, and for
    qdrant-client when it opens a server memory: about 5 s and 1 s it may never need."""
    import subprocess
    import sys

    code = ("import sys\nfrom llama_index_vmem import VMemIndex, VMemRetriever, VMemChatEngine\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'sentence_transformers', "
            "'qdrant_client', 'sklearn'}))")
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()
    assert loaded == "[]"


def test_a_question_and_its_pictures_words_are_embedded_in_one_pass(minilm, monkeypatch):
    """A question with a caption searches with two texts (the question, and the question plus the
    picture's words): one forward pass of the model for both, each as it would embed alone, and
    asking again embeds nothing."""
    from llama_index_vmem import VMemIndex, VMemQueryBundle

    passes = []
    original = type(minilm)._embed
    monkeypatch.setattr(type(minilm), "_embed", lambda self, texts, prompt_name=None: (
        passes.append((list(texts), prompt_name)), original(self, texts, prompt_name))[1])
    question = VMemQueryBundle("Which entrepreneur did I mention about this?", image_caption="A red Tesla electric car")
    with VMemIndex.from_defaults(embed_model=minilm) as index:
        index.add_rounds([{"user": "Electric cars are mainstream now.", "assistant": "Elon Musk pushed the industry."}])
        passes.clear()
        result = index.as_retriever().retrieve_with_plan(question)
        texts = {a.text for a in result.anchors.values()}
        assert len(texts) == 2
        assert len(passes) == 1 and set(passes[0][0]) == texts and passes[0][1] == "query"
        assert index.query_texts_encoded == 2
        for text, vector in zip(passes[0][0], index.encode_query_texts(passes[0][0])):
            alone = minilm.get_query_embedding(text)
            assert np.dot(vector, alone) / np.linalg.norm(vector) / np.linalg.norm(alone) > 0.9999
        index.as_retriever().retrieve_with_plan(question)
        assert index.query_texts_encoded == 2 and len(passes) == 3  # only the two single checks above
