"""Whisper (transformers' WhisperForConditionalGeneration): speech recognition and translation into English."""
