"""The commands that talk to a running server over gRPC: embed, generate, transcribe, heads, health, models."""

from __future__ import annotations

import sys
from pathlib import Path


def cmd_embed(args) -> None:
    import json

    with _client(args) as client:
        result = client.embed(args.texts, model=args.model, normalize=args.normalize, truncate=args.truncate)
    for text, vector in zip(args.texts, result.vectors):
        if args.json:
            print(json.dumps({"text": text, "embedding": vector.tolist()}))
        else:
            head = ", ".join(f"{v:.4f}" for v in vector[:5])
            print(f"{result.model} [{len(vector)}] [{head}, ...]  {text[:60]!r}")
    if not args.json:
        u = result.usage
        print(
            f"usage: {u.prompt_tokens} tokens, queue {u.queue_seconds * 1e3:.1f} ms, "
            f"tokenization {u.tokenization_seconds * 1e3:.1f} ms, inference {u.inference_seconds * 1e3:.1f} ms",
            file=sys.stderr,
        )


def cmd_generate(args) -> None:
    """Streams the output to the terminal as it is generated."""
    import grpc

    from service.grpc_api.client import FINISH_REASON_NAMES

    params = {
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "repetition_penalty": args.repetition_penalty,
        "stop": args.stop,
        "ignore_eos": args.ignore_eos,
        "num_beams": args.num_beams,
        "num_return_sequences": args.num_return_sequences,
        "source_language": args.source_language,
        "target_language": args.target_language,
    }
    if args.seed is not None:
        params["seed"] = args.seed
    try:
        with _client(args, timeout=args.timeout) as client:
            if args.num_beams > 1:  # beam search does not stream: its best hypothesis comes whole
                response = client.generate(args.text, model=args.model, **params)
                if len(response.hypotheses) > 1:  # the n-best list, a line each: score, then text
                    for hypothesis in response.hypotheses:
                        print(f"{hypothesis.score:.4f}\t{hypothesis.text}")
                else:
                    print(response.text)
                print(
                    f"[{FINISH_REASON_NAMES[response.finish_reason]}: {response.usage.generated_tokens} tokens, "
                    f"{args.num_beams} beams]",
                    file=sys.stderr,
                )
                return
            for message in client.generate_stream(args.text, model=args.model, **params):
                print(message.text, end="", flush=True)
                if message.finish_reason:
                    u = message.usage
                    print()
                    print(
                        f"[{FINISH_REASON_NAMES[message.finish_reason]}: {u.generated_tokens} tokens, "
                        f"first after {u.time_to_first_token_seconds * 1e3:.1f} ms]",
                        file=sys.stderr,
                    )
    except grpc.RpcError as error:
        sys.exit(f"\n{error.code().name}: {error.details()}")


def clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds * 1000), 60_000)
    return f"{minutes:02d}:{rest // 1000:02d}.{rest % 1000:03d}"


def cmd_transcribe(args) -> None:
    """Sends FILE in pieces (TranscribeStream) and prints each window's segments as they are final."""
    import json

    import grpc

    from service.grpc_api.pb import inference_pb2 as pb

    options = {
        "task": pb.SPEECH_TASK_TRANSLATE if args.task == "translate" else pb.SPEECH_TASK_TRANSCRIBE,
        "language": args.language,
        "prompt": args.prompt,
        "temperature": args.temperature,
        "beam_size": args.beam_size,
        "word_timestamps": args.word_timestamps,
    }
    if args.cut_at_silences:
        options["chunking_strategy"] = pb.SilenceCuts()  # the server's defaults
    try:
        audio = Path(args.file).read_bytes()
    except OSError as error:
        sys.exit(f"{args.file}: {error.strerror}")
    try:
        with _client(args, timeout=args.timeout) as client:
            for message in client.transcribe_stream(audio, model=args.model, **options):
                for s in message.segments:
                    if args.format == "json":
                        words = [{"word": w.word, "start": round(w.start, 2), "end": round(w.end, 2)} for w in s.words]
                        segment = {"start": round(s.start, 2), "end": round(s.end, 2), "text": s.text}
                        print(json.dumps({**segment, **({"words": words} if words else {})}), flush=True)
                    elif args.format == "text":
                        print(s.text, end="", flush=True)
                    else:
                        print(f"[{clock(s.start)} --> {clock(s.end)}] {s.text}", flush=True)
                if message.done:
                    if args.format == "text":
                        print()
                    print(f"[{message.model}: {message.duration:.1f} s of {message.language}]", file=sys.stderr)
    except grpc.RpcError as error:
        sys.exit(f"{error.code().name}: {error.details()}")


KINDS = {"encoder": "encoder_self", "decoder": "decoder_self", "cross": "cross"}
KIND_TITLES = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder self-attention",
    "cross": "cross-attention",
}


def cmd_heads(args) -> None:
    """Asks a running server (started with --attention-maps) for the attention maps of TEXT; prints a
    summary per head and, with --out, draws them."""
    import grpc

    from cli.heads import format_table, summarize

    try:
        with _client(args, timeout=args.timeout) as client:
            maps = client.attention(
                args.text,
                model=args.model,
                target=args.target_text,
                max_new_tokens=args.max_new_tokens,
                layers=args.layers,
            )
    except grpc.RpcError as error:
        sys.exit(f"{error.code().name}: {error.details()}")
    kind = KINDS[args.kind] if args.kind else ("cross" if "cross" in maps.weights else "encoder_self")
    if kind not in maps.weights:
        sys.exit(f"--kind {args.kind}: model {maps.model!r} has no {KIND_TITLES[kind]}")
    weights, layers = maps.weights[kind], maps.layers[kind]
    # Decoder rows are labelled by what each position writes (its argmax); columns by what is read.
    rows = maps.source_tokens if kind == "encoder_self" else maps.predicted_tokens
    columns = maps.target_tokens if kind == "decoder_self" else maps.source_tokens
    key_special = maps.target_special if kind == "decoder_self" else maps.source_special
    generated = f" -> {maps.target_text!r}" if maps.target_tokens else ""
    print(
        f"{maps.model}, {KIND_TITLES[kind]}: {len(layers)} layers x {weights.shape[1]} heads, "
        f"{weights.shape[2]} x {weights.shape[3]} tokens; {args.text!r}{generated}"
    )
    print(format_table(summarize(weights, layers, key_special, self_attention=kind != "cross")))
    if args.out:
        try:
            from cli.heads_figure import draw
        except ImportError:
            sys.exit("attnserve heads --out needs matplotlib: pip install 'attnserve[plot]'")
        title = [f"{maps.model}: {KIND_TITLES[kind]}", f"{args.text!r}{generated}"]
        if kind != "encoder_self":
            title.append("rows: what each decoder position writes; columns: what it attends to")
        layout = draw(weights, layers, rows, columns, title, args.out)
        print(
            f"{args.out}: {len(layers)} x {weights.shape[1]} heatmaps, {layout.width} x {layout.height} pixels",
            file=sys.stderr,
        )


def cmd_health(args) -> None:
    """Exit 0 when the server (or one service) is SERVING: for container health checks and exec probes."""
    import grpc

    try:
        with _client(args, timeout=args.timeout) as client:
            status = client.health(args.service)
    except grpc.RpcError as error:
        sys.exit(f"{args.target}: {error.code().name}: {error.details()}")
    print(status)
    sys.exit(0 if status == "SERVING" else 1)


def cmd_models(args) -> None:
    from service.grpc_api.client import TASK_NAMES

    with _client(args) as client:
        models = client.list_models()
    rows = [["name", "task", "dimensions", "max input tokens", "provider", "opset", "default"]]
    for m in models:
        rows.append(
            [
                m.name,
                TASK_NAMES.get(m.task, "?"),
                m.dimensions,
                m.max_input_tokens,
                m.execution_provider,
                m.opset,
                "yes" if m.is_default else "",
            ]
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


def _client(args, **kwargs):
    from service.grpc_api.client import Client

    token = Path(args.token_file).read_text().strip() if args.token_file else None
    return Client(args.target, tls_ca=args.tls_ca, tls_cert=args.tls_cert, tls_key=args.tls_key, token=token, **kwargs)
