"""Speculative Streaming as a transformers `custom_generate` method (see README.md beside this file).

    out = model.generate(**inputs, custom_generate="path/to/specstream", trust_remote_code=True,
                         streams="user/streams-repo", max_new_tokens=64)

`custom_generate` names the directory (or hub repo) that holds this `custom_generate/` folder. transformers
calls `generate(model=model, **every argument of model.generate)`; this returns what `model.generate`
returns: a LongTensor [batch, prompt + new] (rows that stop early are padded with pad_token_id), or a
GenerateDecoderOnlyOutput with `return_dict_in_generate=True`.

Lossless: in greedy mode the tokens equal plain `model.generate` (and `specstream generate`) token for token;
with sampling, each token follows the model's own distribution (not transformers' random stream).
Needs the specstream package (`pip install .` in its repository) — this file is only the adapter.
"""

from __future__ import annotations

import copy

import torch

try:
    from specstream_core import Engine, StreamParams
    from specstream_core.model.streams import read_stream_config
except ImportError as exc:  # pragma: no cover - the adapter without its engine
    raise ImportError("this custom_generate method needs the specstream package: `pip install .` in a checkout of "
                      "the specstream repository") from exc

# generation-config fields this method honours; everything else of model.generate is ignored
HONOURED = ("max_new_tokens", "max_length", "num_beams", "num_return_sequences", "do_sample", "temperature", "top_k", "top_p", "eos_token_id",
            "pad_token_id", "repetition_penalty", "no_repeat_ngram_size", "stop_strings", "return_dict_in_generate")


# arguments of model.generate this method cannot honour: refused when set, never silently ignored
REFUSED = ("logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn", "assistant_model",
           "negative_prompt_ids", "negative_prompt_attention_mask")


def _generation_config(model, generation_config, kwargs: dict):
    gen = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
    for key in HONOURED:
        if key in kwargs:
            setattr(gen, key, kwargs.pop(key))
    return gen


def _streams(model, streams, gamma: int, n_stream_layers: int | None, seed: int):
    """(StreamParams attached to model, whether this call attached it and must detach it, the stream set's
    n-gram store when a directory has one)."""
    if isinstance(streams, StreamParams):
        if streams._attached_to is not model:
            streams.attach(model)
        return streams, False, None
    if streams is None:
        return StreamParams.fresh(model, gamma=gamma, n_stream_layers=n_stream_layers, seed=seed), True, None
    from specstream_core.model.hub import local_dir

    directory = local_dir(str(streams))
    if read_stream_config(directory).mode == "shared":
        raise ValueError("shared-mode streams change the base weights (their LoRA): load them with "
                         "specstream_core.Engine.load(base, streams) instead of custom_generate")
    from specstream_core.decoding.drafters.ngram_store import NgramStore

    store = NgramStore.load(directory)
    if store is not None:
        store.check_vocab(model.config.vocab_size)
    return StreamParams.load(directory, model), True, store


def _prompts(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[list[int]]:
    """Each row's prompt without its padding (left or right)."""
    if attention_mask is None:
        return [row.tolist() for row in input_ids]
    return [row[mask.bool()].tolist() for row, mask in zip(input_ids, attention_mask)]


def generate(model, inputs: torch.Tensor | None = None, generation_config=None, streamer=None, streams=None,
             gamma: int = 4, n_stream_layers: int | None = None, tree_topk=None, prune_threshold: float | None = None,
             node_budget: int | None = None, mode: str = "ss", seed: int | None = None,
             stream_seed: int = 0, **kwargs):
    """Speculative streaming in place of `model.generate`.

    streams: a stream-set directory, a hub repo id, a StreamParams, or None for fresh (untrained, still
    lossless) streams with `gamma` streams over the top `n_stream_layers` layers. tree_topk /
    prune_threshold / node_budget: the draft tree (default: what the stream set records). mode: "ss", or
    "ar" for plain decoding by the same engine. seed: the sampling seed (do_sample=True).
    """
    refused = [k for k in REFUSED if kwargs.get(k)]
    if refused:
        raise ValueError(f"speculative streaming does not take {', '.join(refused)}")
    input_ids = inputs if inputs is not None else kwargs.pop("input_ids", None)
    if input_ids is None:
        raise ValueError("speculative streaming needs input_ids")
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    attention_mask = kwargs.pop("attention_mask", None)
    gen = _generation_config(model, generation_config, kwargs)
    if (gen.num_beams or 1) > 1 or (gen.num_return_sequences or 1) > 1:
        raise ValueError("speculative streaming decodes one sequence per prompt: num_beams and "
                         "num_return_sequences must be 1")
    max_new = gen.max_new_tokens if gen.max_new_tokens is not None else gen.max_length - input_ids.shape[1]
    settings = dict(mode=mode, max_new_tokens=int(max_new), seed=seed,
                    repetition_penalty=float(gen.repetition_penalty or 1.0),
                    no_repeat_ngram_size=int(gen.no_repeat_ngram_size or 0))
    if gen.do_sample:
        settings.update(temperature=float(gen.temperature or 1.0), top_k=int(gen.top_k or 0),
                        top_p=float(gen.top_p if gen.top_p is not None else 1.0))
    if gen.stop_strings:
        settings["stop_strings"] = tuple([gen.stop_strings] if isinstance(gen.stop_strings, str)
                                         else gen.stop_strings)
    draft = {"tree_topk": tuple(tree_topk) if tree_topk else None, "prune_threshold": prune_threshold,
             "node_budget": node_budget}
    settings.update({k: v for k, v in draft.items() if v is not None})

    params, owned, store = _streams(model, streams, gamma, n_stream_layers, stream_seed)
    try:
        engine = Engine(model, kwargs.get("tokenizer"), params, name=getattr(model, "name_or_path", "model"),
                        ngrams=store)
        eos = gen.eos_token_id
        engine.eos_ids = set(eos if isinstance(eos, (list, tuple)) else ([eos] if eos is not None else []))
        cfg = engine.decode_config(**settings)
        prompts = _prompts(input_ids, attention_mask)
        results = engine.generate_batch(prompts, cfg) if len(prompts) > 1 else [engine.generate(prompts[0], cfg)]
    finally:
        if owned:
            params.detach()

    pad = gen.pad_token_id if gen.pad_token_id is not None else (next(iter(engine.eos_ids), 0))
    pad = pad[0] if isinstance(pad, (list, tuple)) else pad
    width = max(len(r.token_ids) for r in results)
    new = torch.full((len(results), width), int(pad), dtype=input_ids.dtype, device=input_ids.device)
    for i, r in enumerate(results):
        new[i, : len(r.token_ids)] = torch.tensor(r.token_ids, dtype=input_ids.dtype)
    sequences = torch.cat([input_ids, new], dim=1)
    if streamer is not None:
        streamer.put(input_ids.cpu())
        for i in range(width):
            streamer.put(new[:, i].cpu())
        streamer.end()
    if gen.return_dict_in_generate:
        from transformers.generation.utils import GenerateDecoderOnlyOutput

        output = GenerateDecoderOnlyOutput(sequences=sequences)
        output.specstream_stats = [r.stats for r in results]
        return output
    return sequences
