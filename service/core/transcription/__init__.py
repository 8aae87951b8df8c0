"""The transcription capability (speech in, text out): so far, uploads decoded to 16 kHz mono and Whisper's
log-mel front-end."""
