"""transformers' automatic-speech-recognition pipeline as a Whisper engine for benchmarks/whisper_bench.py:
an attnserve model directory's weights in a WhisperForConditionalGeneration (each tensor placed by the
importer's own names, model/families/whisper/importer.py rename), its tokenizer.json and rules as the
tokenizer and generation config, float32 on the CPU; the recordings cut into 30 s chunks by the pipeline
and decoded batch_size at a time with beams of 5. Run in a process of its own:

    .venv/bin/python -m benchmarks.transformers_whisper_engine MODEL_DIR THREADS FILE...   # -> a JSON line
"""

from __future__ import annotations

import json
import sys
import time
import wave
from pathlib import Path

import numpy as np

BATCH = 8  # chunks a forward pass, as faster-whisper's batched pipeline


def hugging_face_whisper(model_dir: Path):
    """(model, tokenizer, feature extractor) holding the directory's weights and rules."""
    import torch
    from safetensors.torch import load_file
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperTokenizerFast,
    )

    from model.families.whisper.importer import rename

    c = json.loads((model_dir / "config.json").read_text())["model"]
    w = c["whisper"]
    config = WhisperConfig(
        vocab_size=c["vocab_size"],
        num_mel_bins=c["n_mels"],
        d_model=c["d_model"],
        encoder_layers=c["n_encoder_layers"],
        decoder_layers=c["n_decoder_layers"],
        encoder_attention_heads=c["n_heads"],
        decoder_attention_heads=c["n_heads"],
        encoder_ffn_dim=c["d_ff"],
        decoder_ffn_dim=c["d_ff"],
        max_source_positions=c["max_source_positions"],
        max_target_positions=c["max_positions"],
        pad_token_id=c["pad_id"],
        bos_token_id=w["end_of_text_id"],
        eos_token_id=c["eos_id"],
        decoder_start_token_id=c["bos_id"],
    )
    model = WhisperForConditionalGeneration(config).eval()
    ours = load_file(str(model_dir / "model.safetensors"))
    state = model.state_dict()
    with torch.no_grad():
        for name, tensor in state.items():
            source = rename(name)
            if source is not None:
                tensor.copy_(ours[source])
        model.model.encoder.embed_positions.weight.copy_(sinusoids(c["max_source_positions"], c["d_model"]))
        model.proj_out.weight = model.model.decoder.embed_tokens.weight
    model.generation_config = GenerationConfig(
        decoder_start_token_id=c["bos_id"],
        eos_token_id=c["eos_id"],
        pad_token_id=c["pad_id"],
        bos_token_id=w["end_of_text_id"],
        no_timestamps_token_id=w["no_timestamps_id"],
        prev_sot_token_id=w["start_of_previous_id"],
        suppress_tokens=w["suppress_ids"],
        begin_suppress_tokens=w["begin_suppress_ids"],
        alignment_heads=w["alignment_heads"],
        is_multilingual=w["multilingual"],
        max_initial_timestamp_index=50,
        max_length=c["max_positions"],
    )
    tokenizer = WhisperTokenizerFast(tokenizer_file=str(model_dir / "tokenizer.json"))
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(c["pad_id"])  # the pipeline's batches pad with it
    return model, tokenizer, WhisperFeatureExtractor(feature_size=c["n_mels"])


def sinusoids(length: int, channels: int):
    from transformers.models.whisper.modeling_whisper import sinusoids as table

    return table(length, channels)


def samples(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768


def main() -> None:
    import torch
    from transformers import pipeline

    model_dir, threads, files = Path(sys.argv[1]), int(sys.argv[2]), [Path(f) for f in sys.argv[3:]]
    torch.set_num_threads(threads)
    model, tokenizer, extractor = hugging_face_whisper(model_dir)
    asr = pipeline(
        "automatic-speech-recognition",
        model=model,
        tokenizer=tokenizer,
        feature_extractor=extractor,
        chunk_length_s=30,
        batch_size=BATCH,
        device="cpu",
    )
    inputs = [{"raw": samples(f), "sampling_rate": 16_000} for f in files]
    asr(inputs[0]["raw"][: 16_000 * 5].copy(), generate_kwargs={"num_beams": 5})  # warm up
    started = time.perf_counter()
    texts = [answer["text"] for answer in asr(inputs, generate_kwargs={"num_beams": 5})]
    wall = time.perf_counter() - started
    # The recordings go through as one stream of chunks: each is done when the whole run is.
    print(json.dumps({"texts": texts, "done": [wall] * len(files), "wall": wall}))


if __name__ == "__main__":
    main()
