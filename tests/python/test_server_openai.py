"""The server through the official `openai` client: every request field, streaming and not."""
import pytest

openai = pytest.importorskip("openai")

from server_util import default_server  # noqa: F401  (pytest fixture)

PROMPT = "Hello"
CHAT = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def client(default_server):  # noqa: F811
    return openai.OpenAI(base_url=default_server.url + "/v1", api_key="x", max_retries=0, timeout=60)


def extra(obj, key):
    """A field the openai models do not declare (token_ids, prompt_token_ids)."""
    return (obj.model_extra or {}).get(key)


def complete(client, **kw):
    kw.setdefault("model", "default")
    kw.setdefault("prompt", PROMPT)
    return client.completions.create(**kw)


def chat(client, **kw):
    kw.setdefault("model", "default")
    kw.setdefault("messages", CHAT)
    return client.chat.completions.create(**kw)


def ids_of(resp, i=0):
    return extra(resp.choices[i], "token_ids")


def greedy_ids(client, n_tokens=32, prompt=PROMPT):
    r = complete(client, prompt=prompt, max_tokens=n_tokens, temperature=0,
                 extra_body={"return_token_ids": True, "ignore_eos": True})
    return r


def test_models_lists_the_served_name(client, default_server):  # noqa: F811
    models = client.models.list().data
    assert [m.id for m in models] == ["default"]
    assert default_server.get("/v1/models").json()["data"][0]["max_model_len"] == 4096


def test_max_tokens_is_respected(client):
    r = complete(client, max_tokens=7, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 7
    assert r.choices[0].finish_reason == "length"
    assert r.usage.total_tokens == r.usage.prompt_tokens + 7
    assert r.usage.prompt_tokens_details.cached_tokens == 0


def test_chat_max_tokens_and_max_completion_tokens(client):
    r = chat(client, max_tokens=5, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"
    r = chat(client, max_completion_tokens=3, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 3
    assert r.choices[0].message.role == "assistant"
    assert r.object == "chat.completion"


def test_temperature_zero_is_deterministic(client):
    a, b = greedy_ids(client), greedy_ids(client)
    assert ids_of(a) == ids_of(b) and a.choices[0].text == b.choices[0].text
    c = chat(client, temperature=0, max_tokens=12, extra_body={"ignore_eos": True})
    d = chat(client, temperature=0, max_tokens=12, extra_body={"ignore_eos": True})
    assert c.choices[0].message.content == d.choices[0].message.content


def test_seed_reproducible_and_seeds_differ(client):
    def run(seed):
        return ids_of(complete(client, max_tokens=16, temperature=1.0, seed=seed,
                               extra_body={"return_token_ids": True, "ignore_eos": True}))
    a, b = run(123), run(123)
    assert a == b and len(a) == 16
    others = [run(s) for s in (124, 125, 126)]
    assert any(o != a for o in others), "different seeds gave identical samples"
    c1 = chat(client, temperature=1.0, seed=7, max_tokens=10, extra_body={"ignore_eos": True})
    c2 = chat(client, temperature=1.0, seed=7, max_tokens=10, extra_body={"ignore_eos": True})
    assert c1.choices[0].message.content == c2.choices[0].message.content


def test_n_choices_have_distinct_indexes_and_seed_plus_j(client):
    body = {"return_token_ids": True, "ignore_eos": True}
    r = complete(client, n=3, max_tokens=10, temperature=1.0, seed=40, extra_body=body)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert r.usage.completion_tokens == 30
    by_index = {c.index: extra(c, "token_ids") for c in r.choices}
    for j in range(3):
        solo = complete(client, n=1, max_tokens=10, temperature=1.0, seed=40 + j, extra_body=body)
        assert ids_of(solo) == by_index[j], f"choice {j} of seed 40 should equal n=1 with seed {40 + j}"
    c = chat(client, n=3, max_tokens=4, temperature=1.0, seed=3, extra_body={"ignore_eos": True})
    assert sorted(ch.index for ch in c.choices) == [0, 1, 2]


def _stop_candidate(text):
    """A short ASCII-letter substring whose first occurrence is past the start of text."""
    for k in range(1, len(text) - 3):
        sub = text[k:k + 3]
        if sub.isascii() and sub.isalpha() and text.find(sub) == k:
            return k, sub
    pytest.fail(f"no usable stop string in {text!r}")


def test_stop_string_truncates(client):
    first = complete(client, max_tokens=32, temperature=0, extra_body={"ignore_eos": True})
    text = first.choices[0].text
    k, sub = _stop_candidate(text)
    r = complete(client, max_tokens=32, temperature=0, stop=sub, extra_body={"ignore_eos": True})
    assert r.choices[0].text == text[:k]
    assert r.choices[0].finish_reason == "stop"
    r = complete(client, max_tokens=32, temperature=0, stop=["\u2603never", sub], extra_body={"ignore_eos": True})
    assert r.choices[0].text == text[:k] and r.choices[0].finish_reason == "stop"
    # Streaming must hold back a stop prefix and never leak it.
    chunks = list(complete(client, max_tokens=32, temperature=0, stop=sub, stream=True,
                           extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text[:k]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_chat_stop_string(client):
    first = chat(client, max_tokens=24, temperature=0, extra_body={"ignore_eos": True}).choices[0].message.content
    k, sub = _stop_candidate(first)
    r = chat(client, max_tokens=24, temperature=0, stop=[sub], extra_body={"ignore_eos": True})
    assert r.choices[0].message.content == first[:k] and r.choices[0].finish_reason == "stop"


def test_echo_prepends_the_prompt(client):
    plain = complete(client, max_tokens=6, temperature=0, extra_body={"ignore_eos": True}).choices[0].text
    r = complete(client, max_tokens=6, temperature=0, echo=True, extra_body={"ignore_eos": True})
    assert r.choices[0].text.endswith(plain)
    assert r.choices[0].text == PROMPT + plain, (
        "SERVER BUG: echo should prepend the prompt as given; the server prepends the decoded prompt ids "
        f"including the BOS token: {r.choices[0].text!r}")


def test_completion_logprobs_shape(client):
    r = complete(client, max_tokens=6, temperature=0, logprobs=3, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    for tok, chosen, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 3
        assert chosen <= 0 and all(v <= 0 for v in top.values())
        assert chosen == pytest.approx(max(top.values()), abs=1e-5), "greedy token must be the most likely"
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
    r0 = complete(client, max_tokens=3, temperature=0, logprobs=0, extra_body={"ignore_eos": True})
    assert all(len(t) == 0 for t in r0.choices[0].logprobs.top_logprobs)
    assert len(r0.choices[0].logprobs.token_logprobs) == 3


def test_chat_logprobs_shape(client):
    r = chat(client, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 5
    for item in content:
        assert len(item.top_logprobs) == 2
        assert item.logprob == pytest.approx(item.top_logprobs[0].logprob, abs=1e-5)
        assert bytes(item.bytes).decode("utf-8", "replace") == item.token or "\ufffd" in item.token
    assert "".join(i.token for i in content) == r.choices[0].message.content or "\ufffd" in r.choices[0].message.content
    r = chat(client, max_tokens=2, logprobs=False)
    assert r.choices[0].logprobs is None


def test_return_token_ids_round_trip(client, default_server):  # noqa: F811
    r = greedy_ids(client, 20)
    ids = ids_of(r)
    assert len(ids) == r.usage.completion_tokens == 20
    prompt_ids = extra(r, "prompt_token_ids")
    assert len(prompt_ids) == r.usage.prompt_tokens
    assert default_server.post("/detokenize", {"tokens": ids}).json()["prompt"] == r.choices[0].text
    c = chat(client, max_tokens=8, temperature=0, extra_body={"return_token_ids": True, "ignore_eos": True})
    assert len(ids_of(c)) == c.usage.completion_tokens == 8
    assert default_server.post("/detokenize", {"tokens": ids_of(c)}).json()["prompt"] == c.choices[0].message.content


def test_stream_include_usage_final_chunk(client):
    chunks = list(complete(client, max_tokens=9, temperature=0, stream=True,
                           stream_options={"include_usage": True},
                           extra_body={"ignore_eos": True, "return_token_ids": True}))
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 9
    streamed_ids = [t for c in chunks if c.choices for t in (extra(c.choices[0], "token_ids") or [])]
    assert streamed_ids == ids_of(greedy_ids(client, 9))
    assert all(c.usage is None for c in chunks[:-1])
    plain = list(complete(client, max_tokens=3, stream=True))
    assert all(c.usage is None for c in plain)


def test_stream_matches_non_stream_completion(client):
    whole = greedy_ids(client, 16).choices[0].text
    chunks = list(complete(client, max_tokens=16, temperature=0, stream=True, extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks) == whole
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


def test_chat_stream_role_first_finish_last(client):
    whole = chat(client, max_tokens=10, temperature=0, extra_body={"ignore_eos": True})
    chunks = list(chat(client, max_tokens=10, temperature=0, stream=True,
                       stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    with_choices = [c for c in chunks if c.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    assert with_choices[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in with_choices[:-1])
    assert "".join(c.choices[0].delta.content or "" for c in with_choices) == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 10
    assert all(c.object == "chat.completion.chunk" for c in chunks)


def test_list_of_ids_prompt(client, default_server):  # noqa: F811
    toks = default_server.post("/tokenize", {"prompt": PROMPT, "add_special_tokens": True}).json()["tokens"]
    by_ids = complete(client, prompt=toks, max_tokens=8, temperature=0,
                      extra_body={"return_token_ids": True, "ignore_eos": True})
    assert by_ids.usage.prompt_tokens == len(toks)
    assert extra(by_ids, "prompt_token_ids") == toks
    assert ids_of(by_ids) == ids_of(greedy_ids(client, 8))
    both = complete(client, prompt=[toks, toks[1:]], max_tokens=4, temperature=0,
                    extra_body={"return_token_ids": True, "ignore_eos": True})
    assert [c.index for c in both.choices] == [0, 1]
    assert both.usage.prompt_tokens == 2 * len(toks) - 1


def test_batch_of_two_string_prompts(client):
    prompts = ["Hello", "The weather today"]
    r = complete(client, prompt=prompts, max_tokens=6, temperature=0,
                 extra_body={"return_token_ids": True, "ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1]
    for i, p in enumerate(prompts):
        assert extra(r.choices[i], "token_ids") == ids_of(greedy_ids(client, 6, prompt=p))
    assert len(extra(r, "prompt_token_ids")) == 2
    r2 = complete(client, prompt=prompts, n=2, max_tokens=3, temperature=1.0, seed=9, extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r2.choices) == [0, 1, 2, 3]
    assert r2.usage.completion_tokens == 12


def test_tokenize_detokenize_round_trip(default_server):  # noqa: F811
    text = "Hello world, naïve café 日本語 😀"
    t = default_server.post("/tokenize", {"prompt": text, "add_special_tokens": False}).json()
    assert t["count"] == len(t["tokens"]) > 0 and t["max_model_len"] == 4096
    assert default_server.post("/detokenize", {"tokens": t["tokens"]}).json()["prompt"] == text
    with_bos = default_server.post("/tokenize", {"prompt": text, "add_special_tokens": True}).json()["tokens"]
    assert with_bos[1:] == t["tokens"] and with_bos[0] == 0


def test_sampling_filters_reduce_to_greedy(client):
    greedy = ids_of(greedy_ids(client, 16))
    for kw in ({"top_k": 1}, {"min_p": 1.0}):
        r = complete(client, max_tokens=16, temperature=1.0, seed=5,
                     extra_body={"return_token_ids": True, "ignore_eos": True, **kw})
        assert ids_of(r) == greedy, kw
    r = complete(client, max_tokens=16, temperature=1.0, top_p=1e-6, seed=5,
                 extra_body={"return_token_ids": True, "ignore_eos": True})
    assert ids_of(r) == greedy
    # top_k -1 and 0 both mean off: same samples as no top_k at all.
    base = ids_of(complete(client, max_tokens=12, temperature=1.0, seed=11,
                           extra_body={"return_token_ids": True, "ignore_eos": True}))
    for k in (-1, 0):
        r = complete(client, max_tokens=12, temperature=1.0, seed=11,
                     extra_body={"return_token_ids": True, "ignore_eos": True, "top_k": k})
        assert ids_of(r) == base
    c = chat(client, max_tokens=8, temperature=1.0, top_p=1e-6, seed=1, extra_body={"ignore_eos": True})
    g = chat(client, max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    assert c.choices[0].message.content == g.choices[0].message.content


def test_penalties_reduce_repetition(client):
    greedy = ids_of(greedy_ids(client, 32))
    # The trained default model repeats some tokens in 32 greedy ones (26 distinct after "Hello").
    assert len(set(greedy)) < len(greedy), "the default model's greedy text is expected to repeat"
    for kw in ({"presence_penalty": 2.0}, {"frequency_penalty": 2.0}):
        r = complete(client, max_tokens=32, temperature=0, extra_body={"return_token_ids": True, "ignore_eos": True}, **kw)
        ids = ids_of(r)
        assert ids != greedy and len(set(ids)) > len(set(greedy)), kw
    r = complete(client, max_tokens=32, temperature=0,
                 extra_body={"return_token_ids": True, "ignore_eos": True, "repetition_penalty": 10.0})
    assert len(set(ids_of(r))) > len(set(greedy))
    # Negative penalties favour repeats.
    r = complete(client, max_tokens=32, temperature=0, frequency_penalty=-2.0,
                 extra_body={"return_token_ids": True, "ignore_eos": True})
    assert len(set(ids_of(r))) <= len(set(greedy))
    # Long enough for the trained model's greedy reply to reuse a token, which the penalty then avoids.
    c = chat(client, max_tokens=48, temperature=0, presence_penalty=2.0, extra_body={"ignore_eos": True})
    g = chat(client, max_tokens=48, temperature=0, extra_body={"ignore_eos": True})
    assert c.choices[0].message.content != g.choices[0].message.content


def test_stop_token_ids(client):
    greedy = ids_of(greedy_ids(client, 16))
    k = next(i for i in range(2, 16) if greedy[i] not in greedy[:i])
    r = complete(client, max_tokens=16, temperature=0,
                 extra_body={"return_token_ids": True, "ignore_eos": True, "stop_token_ids": [greedy[k]]})
    assert r.choices[0].finish_reason == "stop"
    assert ids_of(r)[:k] == greedy[:k] and len(ids_of(r)) <= k + 1


def _sample_with_special(client, want):
    """(seed, choice index, position) of a sampled token in `want` at high temperature, ignoring EOS."""
    for seed in range(1, 6):
        r = complete(client, n=16, max_tokens=128, temperature=2.0, seed=seed,
                     extra_body={"return_token_ids": True, "ignore_eos": True})
        for c in r.choices:
            ids = extra(c, "token_ids")
            assert len(ids) == 128, "ignore_eos must run to max_tokens"
            hit = next((i for i, t in enumerate(ids) if t in want), None)
            if hit is not None:
                return seed, c.index, hit, ids
    pytest.skip(f"no token of {want} sampled in 5 x 16 x 128 draws")


def test_ignore_eos(client):
    seed, idx, pos, ids = _sample_with_special(client, {1, 3})
    r = complete(client, n=16, max_tokens=128, temperature=2.0, seed=seed, extra_body={"return_token_ids": True})
    c = next(c for c in r.choices if c.index == idx)
    assert c.finish_reason == "stop"
    assert extra(c, "token_ids")[:pos] == ids[:pos] and len(extra(c, "token_ids")) <= pos + 1


def test_skip_special_tokens(client):
    seed, idx, pos, ids = _sample_with_special(client, {0, 2})
    special = {0: "<|begin_of_text|>", 2: "<|im_start|>"}[ids[pos]]
    def text(skip):
        r = complete(client, n=16, max_tokens=128, temperature=2.0, seed=seed,
                     extra_body={"ignore_eos": True, "skip_special_tokens": skip})
        return next(c.text for c in r.choices if c.index == idx)
    assert special in text(False)
    assert special not in text(True)


def test_draft_is_accepted_and_ignored(client):
    base = ids_of(greedy_ids(client, 8))
    for d in (True, 4, {"n": 2}):
        r = complete(client, max_tokens=8, temperature=0,
                     extra_body={"return_token_ids": True, "ignore_eos": True, "draft": d})
        assert ids_of(r) == base


def test_max_tokens_zero_and_echo_logprobs(client):
    r = complete(client, max_tokens=0)
    assert r.usage.completion_tokens == 0 and r.choices[0].text == ""
    r = complete(client, max_tokens=2, temperature=0, echo=True, logprobs=1, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == r.usage.prompt_tokens + 2
    assert lp.token_logprobs[0] is None and all(x <= 0 for x in lp.token_logprobs[1:])
    assert all(t is None for t in lp.top_logprobs[:r.usage.prompt_tokens])
    assert all(len(t) == 1 for t in lp.top_logprobs[r.usage.prompt_tokens:])


def test_chat_stream_n2_role_chunk_per_choice(client):
    chunks = list(chat(client, n=2, max_tokens=3, temperature=1.0, seed=2, stream=True, extra_body={"ignore_eos": True}))
    for idx in (0, 1):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == idx]
        assert mine[0].delta.role == "assistant"
        assert mine[-1].finish_reason == "length"
        assert sum(1 for m in mine if m.finish_reason) == 1
