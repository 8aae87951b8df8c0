"""The HTTP front door: OpenAI, TEI, Cohere, DeepL, LibreTranslate and KServe v2 REST over the serving core."""
