"""ColBERT-style late-interaction models as PyLate saves them."""
