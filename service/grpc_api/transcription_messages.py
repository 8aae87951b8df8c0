"""attnserve.v1's transcription messages to and from the core's: a TranscribeRequest into the core's, a
stream of recording pieces gathered into one (refused once over max_upload_bytes), and a transcript's
segments and words into their messages."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..core.transcription.long_form import Segment
from ..core.transcription.speech_chunks import SilenceCuts
from ..core.transcription.transcription import Heard, TranscribeRequest, Transcript, TranscriptionService
from ..errors import InvalidArgument, RequestTooLarge, invalid
from .call_handling import UnparsedRequest
from .pb import inference_pb2 as pb

SPEECH_TASKS = {pb.SPEECH_TASK_TRANSCRIBE: "transcribe", pb.SPEECH_TASK_TRANSLATE: "translate"}
SPEECH_TASK_ENUMS = {name: number for number, name in SPEECH_TASKS.items()}
DEFAULT_BEAMS = 5


def transcribe_request(request: pb.TranscribeRequest, audio: bytes | None = None) -> TranscribeRequest:
    """audio: the recording where it came in pieces (else the request's own)."""
    return TranscribeRequest(
        audio=request.audio if audio is None else audio,
        model=request.model,
        task=SPEECH_TASKS.get(request.task, str(request.task)),
        language=request.language,
        prompt=request.prompt,
        temperature=request.temperature,
        beam_size=request.beam_size or DEFAULT_BEAMS,
        word_timestamps=request.word_timestamps,
        without_timestamps=request.without_timestamps,
        chunking_strategy=silence_cuts(request.chunking_strategy) if request.HasField("chunking_strategy") else None,
    )


def silence_cuts(message: pb.SilenceCuts) -> SilenceCuts:
    """The fields set, over the defaults."""
    fields = ("threshold", "silence_duration_ms", "prefix_padding_ms")
    return SilenceCuts(**{name: getattr(message, name) for name in fields if message.HasField(name)})


async def gathered_request(messages: AsyncIterator, max_upload_bytes: int) -> TranscribeRequest:
    """A TranscribeStream's messages until the client half-closes: the first one's options, every one's
    audio. Refused as soon as the pieces exceed max_upload_bytes, so that nothing more is held."""
    options, pieces, size = None, [], 0
    async for message in messages:
        if isinstance(message, UnparsedRequest):
            raise InvalidArgument(f"request: not a valid TranscribeStreamRequest: {message.error}", "request")
        if options is None:
            options = message.options
            pieces.append(options.audio)
            size += len(options.audio)
        pieces.append(message.audio)
        size += len(message.audio)
        if size > max_upload_bytes:
            raise RequestTooLarge(
                f"audio: over {size} bytes so far; at most {max_upload_bytes} (max_upload_bytes)", "audio"
            )
    if options is None:
        raise invalid("options", "no message came: the first one carries the options")
    return transcribe_request(options, b"".join(pieces))


def segment_message(s: Segment) -> pb.TranscriptSegment:
    return pb.TranscriptSegment(
        id=s.id,
        seek=s.seek,
        start=s.start,
        end=s.end,
        text=s.text,
        tokens=s.tokens,
        temperature=s.temperature,
        avg_logprob=s.avg_logprob,
        compression_ratio=s.compression_ratio,
        no_speech_prob=s.no_speech_prob,
        words=[pb.TranscribedWord(word=w.word, start=w.start, end=w.end, probability=w.probability) for w in s.words],
        token_logprobs=s.token_log_probs,
    )


def transcript_message(t: Transcript) -> pb.TranscribeResponse:
    return pb.TranscribeResponse(
        model=t.model,
        task=SPEECH_TASK_ENUMS[t.task],
        language=t.language,
        duration=t.duration,
        text=t.text,
        segments=[segment_message(s) for s in t.segments],
    )


async def stream_messages(
    transcription: TranscriptionService, heard: Heard
) -> AsyncIterator[pb.TranscribeStreamResponse]:
    """A message as each window's segments are final, then the last one with the whole text."""
    model, texts = heard.model.name, []
    async for segment in transcription.segments(heard):
        texts.append(segment.text)
        yield pb.TranscribeStreamResponse(model=model, language=heard.language, segments=[segment_message(segment)])
    yield pb.TranscribeStreamResponse(
        model=model, language=heard.language, done=True, text="".join(texts), duration=heard.duration
    )
