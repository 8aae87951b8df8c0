"""Documents a translation job takes (txt, html, docx, pptx, xlsx, xliff, srt, vtt): each read into the
pieces of text to translate, and written back with their translations in place."""
