"""Texts that probe MiniLM's tokenizer and encoder: accents, scripts, emoji, code, one token, and more than
its 256 tokens (conftest.py's reference_embeddings are sentence-transformers' vectors of them)."""

TEXTS = [
    "The delivery truck, which was late, blocked the narrow street.",
    "She saw the man with the telescope.",
    "A woman used a telescope to look at a man.",
    "Zürich's café served crème brûlée; naïve façade, Ærøskøbing, Øresund.",  # accents
    "Привет, как дела? Γειά σου κόσμε. مرحبا بالعالم",  # Cyrillic, Greek, Arabic
    "今日は天気がいいですね。我喜欢学习机器学习。한국어 문장입니다.",  # CJK
    "Launch day 🚀🔥 — we did it!! 👩‍💻👨‍👩‍👧 ✔️",  # emoji, ZWJ sequences
    "def mean(xs):\n    return sum(xs) / len(xs)  # guard against [] elsewhere",  # code
    "SELECT id, name FROM users WHERE created_at > NOW() - INTERVAL '7 days';",
    "a",  # one token
    "?",
    "   leading and trailing spaces   ",
    " ".join(f"word{i} and more text" for i in range(150)),  # far past 256 tokens
    "unbelievably " * 300,  # one word repeated past 256 tokens
]
